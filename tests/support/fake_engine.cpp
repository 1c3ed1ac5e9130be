#include "tests/support/fake_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <thread>

#include "engine/common/error.h"
#include "engine/loader/lora_adapter.h"
#include "engine/request/sampling_params.h"

namespace cypris::fake {

struct FakeChoice {
  std::string text;
  int generated = 0;
  bool finished = false;
};

struct FakeRequest {
  GenerateRequest req;
  std::shared_ptr<RequestStream> stream;
  std::vector<FakeChoice> choices;
  int max_tokens = 0;
  bool fail = false;
  bool client_fail = false;
  bool first = true;
  int64_t generated_total = 0;
  std::chrono::steady_clock::time_point ready_at;  // no tokens before (a long prefill)
};

struct FakeEngine::Core {
  FakeEngineOptions opts;
  FakeTokenizer tok;
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::map<std::string, FakeRequest> active;
  std::vector<std::string> aborted;
  std::vector<GenerateRequest> submitted;
  int64_t prompt_total = 0, gen_total = 0;
  int submit_all_calls = 0;
  bool stop = false;
  std::thread thread;

  void loop();
  void step();
  void abort(const std::string& id);
};

std::string FakeEngine::word(int choice, int k) {
  return choice == 0 ? fmt::format(" t{}", k) : fmt::format(" c{}t{}", choice, k);
}

std::string FakeEngine::expected_text(int choice, int n) {
  std::string s;
  for (int k = 0; k < n; ++k) s += word(choice, k);
  return s;
}

static PositionLogprobs fake_logprobs(int32_t id, int top_n) {
  PositionLogprobs p;
  p.token_id = id;
  p.logprob = -0.5f;
  p.rank = 1;
  for (int k = 0; k < top_n; ++k) {
    p.top.push_back({k == 0 ? id : id + k, -0.5f - float(k)});
  }
  return p;
}

void FakeEngine::Core::step() {
  std::vector<std::pair<std::shared_ptr<RequestStream>, RequestOutput>> outs;
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto now = std::chrono::steady_clock::now();
    for (auto it = active.begin(); it != active.end();) {
      FakeRequest& r = it->second;
      if (now < r.ready_at) {
        ++it;
        continue;
      }
      const SamplingParams& p = *r.req.params;
      RequestOutput out;
      out.request_id = r.req.request_id;
      out.num_prompt_tokens = static_cast<int64_t>(r.req.prompt_token_ids.size());
      if (r.first && p.prompt_logprobs) {
        for (size_t i = 1; i < r.req.prompt_token_ids.size(); ++i) {
          out.prompt_logprobs.push_back(fake_logprobs(r.req.prompt_token_ids[i], *p.prompt_logprobs));
        }
      }
      r.first = false;
      bool all_done = true;
      for (size_t ci = 0; ci < r.choices.size(); ++ci) {
        FakeChoice& c = r.choices[ci];
        if (c.finished) continue;
        CompletionDelta d;
        d.index = static_cast<int>(ci);
        const std::string w = word(static_cast<int>(ci), c.generated);
        const int32_t id = tok.id_of(w);
        c.generated++;
        r.generated_total++;
        gen_total++;
        d.token_ids.push_back(id);
        if (p.logprobs) d.logprobs.push_back(fake_logprobs(id, *p.logprobs));
        std::string next = c.text + w;
        for (const auto& s : p.stop) {
          size_t pos = s.empty() ? std::string::npos
                                 : next.find(s, c.text.size() >= s.size() ? c.text.size() - s.size() + 1 : 0);
          if (pos != std::string::npos) {
            size_t end = p.include_stop_str_in_output ? pos + s.size() : pos;
            d.finish_reason = "stop";
            d.stop_reason = s;
            next = next.substr(0, std::max(end, c.text.size()));
            break;
          }
        }
        if (!d.finish_reason &&
            std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), id) != p.stop_token_ids.end()) {
          d.finish_reason = "stop";
          d.stop_reason = std::to_string(id);
        }
        if (!d.finish_reason && c.generated >= r.max_tokens) d.finish_reason = "length";
        d.text = next.substr(c.text.size());
        c.text = next;
        // --skip-tokenizer-init: the engine detokenizes nothing, outputs carry only token ids.
        if (!opts.with_tokenizer) d.text.clear();
        if (d.finish_reason) c.finished = true;
        all_done = all_done && c.finished;
        out.outputs.push_back(std::move(d));
      }
      out.num_generated_tokens = r.generated_total;
      if (r.fail) {
        out.error = "simulated engine failure";
        all_done = true;
      } else if (r.client_fail) {
        out.error = "banned_strings: the model kept producing banned phrases (simulated)";
        out.client_error = true;
        all_done = true;
      }
      out.finished = all_done;
      outs.emplace_back(r.stream, std::move(out));
      if (all_done) {
        it = active.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [s, o] : outs) s->push(std::move(o));
}

void FakeEngine::Core::loop() {
  std::unique_lock<std::mutex> lock(mu);
  while (!stop) {
    if (active.empty()) {
      cv.wait(lock, [this] { return stop || !active.empty(); });
      continue;
    }
    lock.unlock();
    std::this_thread::sleep_for(opts.token_delay);
    step();
    lock.lock();
  }
}

void FakeEngine::Core::abort(const std::string& id) {
  std::shared_ptr<RequestStream> s;
  RequestOutput out;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = active.find(id);
    if (it == active.end()) return;
    aborted.push_back(id);
    s = it->second.stream;
    out.request_id = id;
    out.finished = true;
    out.num_prompt_tokens = static_cast<int64_t>(it->second.req.prompt_token_ids.size());
    out.num_generated_tokens = it->second.generated_total;
    for (size_t ci = 0; ci < it->second.choices.size(); ++ci) {
      if (it->second.choices[ci].finished) continue;
      CompletionDelta d;
      d.index = static_cast<int>(ci);
      d.finish_reason = "abort";
      out.outputs.push_back(d);
    }
    active.erase(it);
  }
  cv.notify_all();
  s->push(std::move(out));
}

FakeEngine::FakeEngine(FakeEngineOptions opts) : core_(std::make_shared<Core>()) {
  opts_lora_ = opts.lora;
  core_->opts = std::move(opts);
  core_->thread = std::thread([c = core_.get()] { c->loop(); });
}

FakeEngine::~FakeEngine() {
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->stop = true;
  }
  core_->cv.notify_all();
  core_->thread.join();
}

std::shared_ptr<RequestStream> FakeEngine::submit(GenerateRequest req) {
  CYPRIS_CHECK(req.params != nullptr, "request {} has no sampling parameters", req.request_id);
  const SamplingParams& p = *req.params;
  const int64_t plen = static_cast<int64_t>(req.prompt_token_ids.size());
  const int64_t max_len = core_->opts.max_model_len;
  const int64_t max_tokens = p.max_tokens ? *p.max_tokens : max_len - plen;
  if (plen + max_tokens > max_len) {
    CYPRIS_FAIL(
        "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
        "messages, {} in the completion). Please reduce the length of the messages or completion.",
        max_len, plen + max_tokens, plen, max_tokens);
  }
  std::weak_ptr<Core> weak = core_;
  auto stream = std::make_shared<RequestStream>(req.request_id, [weak](const std::string& id) {
    if (auto c = weak.lock()) c->abort(id);
  });
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    CYPRIS_CHECK(core_->active.count(req.request_id) == 0, "request id {} is already running", req.request_id);
    core_->submitted.push_back(req);
    core_->prompt_total += plen;
    FakeRequest r;
    r.fail = req.prompt.find("FAIL_NOW") != std::string::npos;
    r.client_fail = req.prompt.find("CLIENT_FAIL") != std::string::npos;
    r.max_tokens = static_cast<int>(max_tokens);
    r.ready_at = std::chrono::steady_clock::now() + core_->opts.first_token_delay;
    r.choices.resize(static_cast<size_t>(std::max(1, p.n)));
    r.stream = stream;
    r.req = std::move(req);
    const std::string id = r.req.request_id;
    core_->active.emplace(id, std::move(r));
  }
  core_->cv.notify_all();
  return stream;
}

std::vector<std::shared_ptr<RequestStream>> FakeEngine::submit_all(std::vector<GenerateRequest> reqs) {
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    ++core_->submit_all_calls;
  }
  return EngineClient::submit_all(std::move(reqs));
}

void FakeEngine::abort(const std::string& id) {
  core_->abort(id);
}

EngineStats FakeEngine::stats() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  EngineStats s;
  s.num_running = static_cast<int64_t>(core_->active.size());
  s.prompt_tokens_total = core_->prompt_total;
  s.generation_tokens_total = core_->gen_total;
  s.kv_cache_usage = 0.25;
  return s;
}

ModelInfo FakeEngine::model_info() const {
  ModelInfo m;
  m.model = "fake/model";
  m.served_names = core_->opts.served_names;
  m.max_model_len = core_->opts.max_model_len;
  m.vocab_size = FakeTokenizer::kVocabSize;
  m.dtype = "float32";
  m.device = "cpu";
  return m;
}

std::vector<LoraInfo> FakeEngine::loras() const {
  std::lock_guard<std::mutex> lock(lora_mu_);
  return loras_;
}

void FakeEngine::load_lora(const std::string& name, const std::string& path) {
  if (!opts_lora_) EngineClient::load_lora(name, path);
  const LoraAdapter a = load_lora_adapter(path, 16);
  std::lock_guard<std::mutex> lock(lora_mu_);
  for (const auto& l : loras_) CYPRIS_CHECK(l.name != name, "a LoRA adapter named '{}' is already loaded", name);
  loras_.push_back({name, path, loras_.size() + 1, a.rank});
}

bool FakeEngine::unload_lora(const std::string& name) {
  std::lock_guard<std::mutex> lock(lora_mu_);
  const auto n = std::erase_if(loras_, [&](const LoraInfo& l) { return l.name == name; });
  return n > 0;
}

const Tokenizer* FakeEngine::tokenizer() const {
  if (!core_->opts.with_tokenizer) return nullptr;
  if (core_->opts.tokenizer) return core_->opts.tokenizer.get();
  return &core_->tok;
}

std::vector<std::string> FakeEngine::aborted() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->aborted;
}

std::vector<GenerateRequest> FakeEngine::submitted() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->submitted;
}

size_t FakeEngine::num_submitted() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->submitted.size();
}

int FakeEngine::submit_all_calls() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->submit_all_calls;
}

bool FakeEngine::wait_for_abort(const std::string& prefix, std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      for (const auto& id : core_->aborted) {
        if (id.rfind(prefix, 0) == 0) return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace cypris::fake
