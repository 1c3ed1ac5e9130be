#include "engine/core/engine.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/core/engine_setup.h"
#include "engine/core/engine_state.h"
#include "engine/core/request.h"
#include "engine/core/sampling_params.h"
#include "engine/loader/model_config.h"
#include "engine/runtime/backend_factory.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/tp_workers.h"
#ifdef CYPRIS_HAVE_CUDA
#include "engine/runtime/cuda/nccl_communicator.h"
#endif
#include "engine/sampling/gpu_sampling.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/batch_layout.h"
#include "engine/scheduler/scheduler.h"
#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/stop_strings.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// banned_strings: a sequence that keeps running into banned phrases ends with an error after this
// many rewinds rather than spend the server's time forever.
constexpr int kMaxBannedStringRewinds = 4096;

int64_t default_max_num_batched_tokens(const EngineConfig& cfg, int64_t max_model_len) {
  if (cfg.scheduler.max_num_batched_tokens) return *cfg.scheduler.max_num_batched_tokens;
  // vLLM's defaults: a small budget with chunked prefill (decodes stay fast), else room for the
  // longest prompt in one step.
  if (cfg.scheduler.enable_chunked_prefill) return std::max<int64_t>(512, cfg.scheduler.max_num_seqs);
  return std::max<int64_t>({max_model_len, 2048, cfg.scheduler.max_num_seqs});
}

}  // namespace

Engine::Engine(const EngineConfig& cfg) : cfg_(cfg) {
  const auto& mo = cfg.model;
  // Fails here, before any file is read, for --device cuda without CUDA in the build or without a GPU.
  const std::string device = resolve_device(cfg.device.device);
  const std::filesystem::path dir = resolve_model_path(mo);

  ModelRunnerOptions ro = runner_options(cfg, dir);
  const int tp = ro.parallel.world_size;

  // Size the cache from the architecture before loading any weight.
  const ModelConfig mc = load_model_config(dir, ro.load.overrides);
  check_tensor_parallel(mc, tp);
#ifdef CYPRIS_HAVE_CUDA
  if (cfg.device.device == "cuda") check_gpu_count(tp, visible_cuda_devices());
#endif
  const int64_t max_model_len = mc.max_model_len;
  // Every rank holds its KV heads (replicated ones count on each rank that holds them).
  const double block_bytes =
      2.0 * mc.num_hidden_layers * ro.block_size * kv_heads_per_rank(mc.num_key_value_heads, tp) * tp * mc.head_dim *
      static_cast<double>(dtype_size(ro.kv_cache_dtype));
  ro.device = device;
  if (device == "cuda") {
    // Decode CUDA graphs are captured once the cache exists (model_runner.cpp, decode_graphs.h).
    ro.enforce_eager = mo.enforce_eager;
    ro.max_seq_len_to_capture = mo.max_context_len_to_capture.value_or(mo.max_seq_len_to_capture);
    // The runner sizes the cache from device memory once the weights are loaded.
    ro.num_blocks = cfg.cache.num_gpu_blocks_override.value_or(0);
    ro.gpu_memory_utilization = cfg.cache.gpu_memory_utilization;
    ro.max_num_batched_tokens = default_max_num_batched_tokens(cfg, max_model_len);
    ro.max_num_seqs = cfg.scheduler.max_num_seqs;
  } else {
    ro.num_blocks = cfg.cache.num_gpu_blocks_override.value_or(
        static_cast<int64_t>(cfg.cache.cpu_kvcache_space * kGiB / block_bytes));
    CYPRIS_CHECK(ro.num_blocks >= 1, "--cpu-kvcache-space {} GiB holds no KV block of {:.1f} KiB for this model",
                 cfg.cache.cpu_kvcache_space, block_bytes / 1024.0);
  }

  if (!mo.skip_tokenizer_init) {
    const std::string tok_dir = mo.tokenizer.value_or(dir.string());
    TokenizerOptions to;
    to.mode = mo.tokenizer_mode;
    tokenizer_ = load_tokenizer(resolve_local_model_dir(tok_dir, mo.tokenizer_revision, mo.download_dir), to);
  }
  runner_ = std::make_unique<ModelRunner>(ro);
  const int64_t num_blocks = runner_->num_blocks();

  SchedulerConfig sc;
  sc.max_model_len = static_cast<int32_t>(max_model_len);
  sc.max_num_batched_tokens = static_cast<int32_t>(default_max_num_batched_tokens(cfg, max_model_len));
  sc.max_num_seqs = static_cast<int32_t>(cfg.scheduler.max_num_seqs);
  sc.enable_chunked_prefill = cfg.scheduler.enable_chunked_prefill;
  sc.policy = parse_scheduling_policy(cfg.scheduler.scheduling_policy);
  sc.preemption_mode = parse_preemption_mode(cfg.scheduler.preemption_mode.value_or("recompute"));
  sc.delay_factor = cfg.scheduler.scheduler_delay_factor;
  sc.block_size = static_cast<int32_t>(cfg.cache.block_size);
  sc.num_gpu_blocks = static_cast<int32_t>(num_blocks);
  sc.enable_prefix_caching = cfg.cache.enable_prefix_caching;
  if (sc.preemption_mode == PreemptionMode::Swap) {
    sc.num_cpu_blocks = static_cast<int32_t>(cfg.cache.swap_space * kGiB / block_bytes);
    runner_->allocate_swap_space(sc.num_cpu_blocks);
  }
  scheduler_ = std::make_unique<Scheduler>(sc);

  SamplerConfig samp;
  samp.vocab_size = static_cast<int32_t>(runner_->config().vocab_size);
  samp.max_log_probs = static_cast<int>(cfg.model.max_log_probs);
  // Rows are sampled in parallel on the CPU threads (the model is idle meanwhile).
  samp.num_threads = static_cast<int>(cfg.device.threads.value_or(std::max(1u, std::thread::hardware_concurrency())));
  eos_ids_ = runner_->config().eos_token_ids;
  if (tokenizer_ && tokenizer_->eos_id() &&
      std::find(eos_ids_.begin(), eos_ids_.end(), *tokenizer_->eos_id()) == eos_ids_.end()) {
    eos_ids_.push_back(*tokenizer_->eos_id());
  }
  if (!eos_ids_.empty()) samp.eos_token_id = eos_ids_.front();
  sampler_ = std::make_unique<Sampler>(samp);

  info_.model = mo.model;
  info_.served_names = mo.served_model_name.empty() ? std::vector<std::string>{mo.model} : mo.served_model_name;
  info_.max_model_len = max_model_len;
  info_.vocab_size = runner_->config().vocab_size;
  info_.dtype = std::string(dtype_name(runner_->weight_dtype()));
  info_.device = runner_->backend().name();

  const double max_concurrency = static_cast<double>(num_blocks) * ro.block_size / static_cast<double>(max_model_len);
  LOG_INFO("KV cache: {} blocks of {} tokens ({:.2f} GiB); maximum concurrency for {} tokens per request: {:.2f}x",
           num_blocks, ro.block_size, num_blocks * block_bytes / kGiB, max_model_len, max_concurrency);
}

Engine::~Engine() = default;

int64_t Engine::num_kv_blocks() const { return runner_->num_blocks(); }

void Engine::set_debug_hook(std::function<void(const std::string&, const Tensor&)> hook) {
  runner_->set_debug_hook(std::move(hook));
}

std::unique_ptr<IncrementalDetokenizer> Engine::make_detokenizer(const SamplingParams& p,
                                                                 std::span<const int32_t> prompt) const {
  if (!tokenizer_) return nullptr;
  DetokenizeOptions dopts{p.skip_special_tokens, p.spaces_between_special_tokens};
  const size_t ctx = std::min(prompt.size(), IncrementalDetokenizer::kDefaultContextTokens);
  return std::make_unique<IncrementalDetokenizer>(*tokenizer_, dopts, prompt.last(ctx));
}

void Engine::add_request(GenerateRequest req, std::shared_ptr<RequestStream> stream) {
  CYPRIS_CHECK(req.params != nullptr, "request {} has no sampling parameters", req.request_id);
  CYPRIS_CHECK(!groups_.count(req.request_id), "request id '{}' is already in use", req.request_id);
  auto params = std::make_shared<SamplingParams>(*req.params);
  params->validate(static_cast<int>(cfg_.model.max_log_probs), static_cast<int32_t>(info_.vocab_size));
  CYPRIS_CHECK(!(params->use_beam_search && !params->banned_strings.empty()),
               "banned_strings cannot be combined with use_beam_search: give one or the other");
  CYPRIS_CHECK(!params->use_beam_search || params->effective_best_of() <= cfg_.scheduler.max_num_seqs,
               "use_beam_search: best_of (the beam width) is {}, more than --max-num-seqs {}",
               params->effective_best_of(), cfg_.scheduler.max_num_seqs);
  CYPRIS_CHECK(!req.prompt_token_ids.empty(), "the prompt is empty: give at least one token");
  for (int32_t id : req.prompt_token_ids) {
    CYPRIS_CHECK(id >= 0 && id < info_.vocab_size, "prompt token id {} is out of range; this model's vocabulary has {} "
                                                   "tokens", id, info_.vocab_size);
  }
  if (params->truncate_prompt_tokens && *params->truncate_prompt_tokens > 0 &&
      static_cast<int64_t>(req.prompt_token_ids.size()) > *params->truncate_prompt_tokens) {
    req.prompt_token_ids.erase(req.prompt_token_ids.begin(),
                               req.prompt_token_ids.end() - *params->truncate_prompt_tokens);
  }
  if (tokenizer_ && params->dry_multiplier > 0.0f && params->dry_sequence_breaker_ids.empty()) {
    params->resolve_dry_sequence_breakers(
        [this](const std::string& s) { return tokenizer_->encode(s, /*add_special_tokens=*/false); });
  }
  const int64_t prompt_len = static_cast<int64_t>(req.prompt_token_ids.size());
  const int64_t max_tokens = params->max_tokens.value_or(info_.max_model_len - prompt_len);
  CYPRIS_CHECK(prompt_len + max_tokens <= info_.max_model_len,
               "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
               "prompt, {} for the completion). Please reduce the prompt or the completion length.",
               info_.max_model_len, prompt_len + max_tokens, prompt_len, max_tokens);
  CYPRIS_CHECK(max_tokens >= 1, "This model's maximum context length is {} tokens and the prompt has {}: no room is "
               "left for a completion.", info_.max_model_len, prompt_len);

  auto g = std::make_unique<Group>();
  g->n = params->n;
  g->num_prompt_tokens = prompt_len;
  g->stream = std::move(stream);
  g->req = std::move(req);
  g->req.params = params;
  if (!params->banned_strings.empty()) g->banned = std::make_shared<const BannedStrings>(params->banned_strings);
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (params->use_beam_search) {
    add_beam_request(*g, params, now);
  } else {
    const auto& prompt = g->req.prompt_token_ids;
    const int num_seqs = params->effective_best_of();
    g->hold_until_done = num_seqs > params->n;
    std::vector<std::shared_ptr<Request>> created;
    try {
      for (int i = 0; i < num_seqs; ++i) {
        auto seq = std::make_unique<Seq>();
        seq->group = g.get();
        seq->index = i;
        const std::string id = num_seqs == 1 ? g->req.request_id : fmt::format("{}#{}", g->req.request_id, i);
        seq->req = std::make_shared<Request>(id, prompt, static_cast<int32_t>(max_tokens), params, g->req.priority,
                                             now);
        seq->sampling = SamplingState(*params, prompt, static_cast<uint32_t>(i));
        seq->detok = make_detokenizer(*params, prompt);
        if (seq->detok) seq->stops = std::make_unique<StopStringMatcher>(params->stop, params->include_stop_str_in_output);
        if (g->banned) {
          seq->banned = std::make_unique<BannedStringMatcher>(g->banned);
          seq->cumulative_at.push_back(0.0);
        }
        scheduler_->add_request(seq->req);
        created.push_back(seq->req);
        seqs_[id] = seq.get();
        g->seqs.push_back(std::move(seq));
      }
    } catch (...) {
      for (auto& r : created) {
        scheduler_->abort_request(r->request_id());
        seqs_.erase(r->request_id());
      }
      throw;
    }
  }
  log_request(cfg_.logging, g->req.request_id, g->req.prompt,
              fmt::format("prompt tokens: {}, max_tokens: {}, n: {}, temperature: {}{}", prompt_len, max_tokens,
                          params->n, params->temperature,
                          params->use_beam_search ? fmt::format(", beam width: {}", params->effective_best_of()) : ""));
  groups_[g->req.request_id] = std::move(g);
}

void Engine::abort_request(const std::string& request_id) {
  auto it = groups_.find(request_id);
  if (it == groups_.end()) return;
  fail_group(*it->second, std::nullopt);
}

bool Engine::has_unfinished_requests() const { return !groups_.empty(); }

void Engine::fail_group(Group& g, std::optional<std::string> error) {
  RequestOutput out;
  end_group(g, std::move(error), out);
  emit(g, out);
}

void Engine::end_group(Group& g, std::optional<std::string> error, RequestOutput& out) {
  out.error = std::move(error);
  if (g.beam) {
    finish_beam(g, "abort", out);
    return;
  }
  for (auto& s : g.seqs) {
    if (s->finished) continue;
    scheduler_->abort_request(s->req->request_id());
    finish_seq(*s, "abort", out);
  }
}

void Engine::finish_seq(Seq& s, const std::string& reason, RequestOutput& out) {
  if (s.finished) return;
  s.finished = true;
  s.group->num_finished++;
  CompletionDelta* d = &out.delta(s.index);
  if (s.detok && !(s.stops && s.stops->stopped())) {
    std::string tail = s.detok->finish();
    StopCheck c = s.stops->push(tail);
    d->text += c.text + (c.stopped() ? "" : s.stops->flush());
  }
  d->finish_reason = reason;
  d->cumulative_logprob = s.cumulative_logprob;
  seqs_.erase(s.req->request_id());
}

bool Engine::emit_token(Seq& s, int32_t token, std::string_view text, PositionLogprobs* logprobs, RequestOutput& out) {
  Group& g = *s.group;
  CompletionDelta& d = out.delta(s.index);
  d.token_ids.push_back(token);
  g.num_generated++;
  if (logprobs) d.logprobs.push_back(std::move(*logprobs));
  if (!s.stops || s.stops->stopped()) return false;
  StopCheck c = s.stops->push(text);
  d.text += c.text;
  if (!c.stopped()) return false;
  d.stop_reason = g.req.params->stop[*c.stop_index];
  scheduler_->finish_request(s.req->request_id(), RequestStatus::FinishedStopped);  // false when it already ended
  finish_seq(s, "stop", out);
  return true;
}

void Engine::release_banned(Seq& s, bool all, RequestOutput& out) {
  const bool with_logprobs = s.group->req.params->logprobs.has_value();
  const size_t upto = all ? s.banned->num_tokens() : s.banned->safe_tokens();
  while (s.banned_sent_tokens < upto && !s.finished) {
    const size_t j = s.banned_sent_tokens++;
    std::optional<PositionLogprobs> lp;
    if (with_logprobs && !s.held_logprobs.empty()) {
      lp = std::move(s.held_logprobs.front());
      s.held_logprobs.pop_front();
    }
    emit_token(s, s.banned->token_id(j), s.banned->token_text(j), lp ? &*lp : nullptr, out);
  }
}

void Engine::rewind_banned(Seq& s, const BannedStringHit& hit, RequestOutput& out) {
  if (++s.num_rewinds > kMaxBannedStringRewinds) {
    LOG_WARN("request {}: banned_strings: gave up after {} rewinds", s.group->req.request_id, kMaxBannedStringRewinds);
    end_group(*s.group,
              fmt::format("banned_strings: the model kept producing banned phrases; gave up after {} rewinds",
                          kMaxBannedStringRewinds),
              out);
    return;
  }
  // The sampled token is in the matcher and the sampler state but not in the request.
  const size_t k = hit.rewind_tokens;
  scheduler_->rewind_request(s.req->request_id(), static_cast<int32_t>(k - 1));
  s.banned->rewind(k);
  s.sampling.rewind(k);
  s.sampling.ban_at_next_position(hit.ban_token_id);
  const size_t kept = s.banned->num_tokens();
  if (s.banned_sent_tokens > kept) throw std::logic_error("banned strings: a rewind reached tokens already sent");
  if (s.held_logprobs.size() > kept - s.banned_sent_tokens) s.held_logprobs.resize(kept - s.banned_sent_tokens);
  s.cumulative_at.resize(kept + 1);
  s.cumulative_logprob = s.cumulative_at.back();
  // The detokenizer cannot go back: a new one reads the kept tokens again (their text is known).
  const SamplingParams& p = *s.group->req.params;
  s.detok = make_detokenizer(p, s.req->prompt_token_ids());
  if (s.detok) s.detok->push(s.req->output_token_ids());
}

void Engine::emit(Group& g, RequestOutput& out) {
  if (g.hold_until_done) {
    for (auto& d : out.outputs) {
      Seq& s = *g.seqs[static_cast<size_t>(d.index)];
      s.all.text += d.text;
      s.all.token_ids.insert(s.all.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
      s.all.logprobs.insert(s.all.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish_reason) s.all.finish_reason = d.finish_reason;
      if (d.stop_reason) s.all.stop_reason = d.stop_reason;
    }
  }
  const bool done = g.done();
  if (g.hold_until_done) {
    if (!done) return;
    // best_of > n: return the n sequences with the highest cumulative logprob.
    std::vector<Seq*> order;
    for (auto& s : g.seqs) order.push_back(s.get());
    std::stable_sort(order.begin(), order.end(),
                     [](const Seq* a, const Seq* b) { return a->cumulative_logprob > b->cumulative_logprob; });
    out.outputs.clear();
    for (int i = 0; i < g.n; ++i) {
      CompletionDelta d = order[static_cast<size_t>(i)]->all;
      d.index = i;
      d.cumulative_logprob = order[static_cast<size_t>(i)]->cumulative_logprob;
      out.outputs.push_back(std::move(d));
    }
  }
  if (out.outputs.empty() && !done) return;
  std::sort(out.outputs.begin(), out.outputs.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  if (!g.first_output_sent && g.req.params->prompt_logprobs) {
    out.prompt_logprobs = std::move(g.seqs.front()->pending_prompt_logprobs);
  }
  out.request_id = g.req.request_id;
  out.finished = done;
  out.num_prompt_tokens = g.num_prompt_tokens;
  out.num_cached_prompt_tokens = g.num_cached_prompt_tokens;
  out.num_generated_tokens = g.num_generated;
  if (g.stream) g.stream->push(std::move(out));
  g.first_output_sent = true;
  if (done) groups_.erase(g.req.request_id);  // g is gone after this line
}

void Engine::step() {
  SchedulerOutput so = scheduler_->schedule();
  if (so.empty()) return;
  swap_outs_total_ += static_cast<int64_t>(so.swapped_out_ids.size());
  runner_->swap_out(so.blocks_to_swap_out);
  runner_->swap_in(so.blocks_to_swap_in);
  runner_->copy_blocks(so.blocks_to_copy);

  for (const auto& sr : so.scheduled) {  // prompt tokens computed this step (for throughput)
    const int32_t end = std::min(sr.num_computed_tokens + sr.num_scheduled_tokens, sr.request->num_prompt_tokens());
    prompt_tokens_total_ += std::max(0, end - sr.num_computed_tokens);
  }
  // The layout's arrays move into the runner's batch; query_start_loc and sampled_requests are
  // read below, so they stay.
  BatchLayout lay = build_batch_layout(so);
  BatchContext bc;
  bc.token_ids = std::move(lay.token_ids);
  bc.positions = std::move(lay.positions);
  bc.slot_mapping = std::move(lay.slot_mapping);
  bc.query_start_loc = lay.query_start_loc;
  bc.seq_lens = std::move(lay.seq_lens);
  bc.block_tables = std::move(lay.block_tables);
  bc.max_blocks_per_seq = lay.max_blocks_per_seq;
  bc.logits_indices = std::move(lay.logits_indices);
  // Prompt logprobs: the rows of scheduled prompt positions whose next token is also in the
  // prompt (row p predicts prompt token p + 1). They follow the sampled rows.
  struct PromptRows {
    Seq* seq;
    int32_t first_pos;  // prompt position of the first row
    int32_t count;
  };
  std::vector<PromptRows> prompt_rows;
  for (size_t k = 0; k < so.scheduled.size(); ++k) {
    const auto& sr = so.scheduled[k];
    auto it = seqs_.find(sr.request->request_id());
    if (it == seqs_.end() || !it->second->group->req.params->prompt_logprobs || it->second->index != 0) continue;
    Seq* s = it->second;
    const int32_t last_prompt_pos = sr.request->num_prompt_tokens() - 2;  // the last row with a prompt target
    const int32_t first = std::max<int32_t>(sr.num_computed_tokens, static_cast<int32_t>(s->prompt_logprobs_done));
    const int32_t last = std::min<int32_t>(sr.num_computed_tokens + sr.num_scheduled_tokens - 1, last_prompt_pos);
    if (first > last) continue;
    for (int32_t p = first; p <= last; ++p) bc.logits_indices.push_back(lay.query_start_loc[k] + p - sr.num_computed_tokens);
    prompt_rows.push_back(PromptRows{s, first, last - first + 1});
  }

  std::vector<StepResult> results;
  std::vector<SampleOutput> samples;
  std::vector<Seq*> sampled_seqs;  // rows of `samples`
  std::vector<Group*> beam_groups;  // beam-search requests that got rows this step
  try {
    // Sampled rows go to the sampler, except beam-search rows, which the beam search takes.
    std::vector<SamplerRow> rows;
    std::vector<int64_t> row_of;
    std::vector<std::pair<Seq*, int64_t>> beam_rows;
    for (size_t j = 0; j < lay.sampled_requests.size(); ++j) {
      Seq* s = seqs_.at(so.scheduled[static_cast<size_t>(lay.sampled_requests[j])].request->request_id());
      if (s->group->beam) {
        beam_rows.emplace_back(s, static_cast<int64_t>(j));
        continue;
      }
      rows.push_back(SamplerRow{s->group->req.params.get(), &s->sampling});
      row_of.push_back(static_cast<int64_t>(j));
      sampled_seqs.push_back(s);
    }
    // GPU sampling: when every row qualifies (and no prompt-logprob or beam rows need the full
    // logits), the logits stay on the device and only tokens and logprobs come back.
    const int max_lp = static_cast<int>(cfg_.model.max_log_probs);
    const bool on_device = !rows.empty() && beam_rows.empty() && prompt_rows.empty() &&
                           runner_->can_sample_on_device() &&
                           std::all_of(rows.begin(), rows.end(),
                                       [&](const SamplerRow& r) { return gpu_sampling_supported(r, max_lp); });
    Logits logits;
    if (on_device) {
      samples = runner_->execute_and_sample(bc, rows, max_lp);
    } else {
      logits = runner_->execute(bc);
      for (const auto& [s, j] : beam_rows) {
        take_beam_row(*s, logits.row(j));
        if (std::find(beam_groups.begin(), beam_groups.end(), s->group) == beam_groups.end()) {
          beam_groups.push_back(s->group);
        }
      }
      if (!rows.empty() && rows.size() == lay.sampled_requests.size()) {
        samples = sampler_->sample(logits.data.data(), rows);
      } else if (!rows.empty()) {
        std::vector<float> packed(rows.size() * static_cast<size_t>(logits.vocab));
        for (size_t i = 0; i < rows.size(); ++i) {
          std::copy_n(logits.row(row_of[i]), logits.vocab,
                      packed.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(logits.vocab)));
        }
        samples = sampler_->sample(packed.data(), rows);
      }
    }
    int64_t row = static_cast<int64_t>(lay.sampled_requests.size());  // prompt-logprob rows follow
    for (const auto& pr : prompt_rows) {
      const auto prompt = pr.seq->req->prompt_token_ids();
      const auto next = prompt.subspan(static_cast<size_t>(pr.first_pos) + 1, static_cast<size_t>(pr.count));
      const int num_top = std::min(*pr.seq->group->req.params->prompt_logprobs, static_cast<int>(cfg_.model.max_log_probs));
      const auto lps = prompt_logprobs(logits.row(row), static_cast<int32_t>(logits.vocab), next, num_top);
      for (size_t i = 0; i < lps.size(); ++i) {
        PositionLogprobs lp;
        lp.token_id = next[i];
        lp.logprob = lps[i].logprob;
        lp.rank = lps[i].rank;
        lp.top = lps[i].top_logprobs;
        pr.seq->pending_prompt_logprobs.push_back(std::move(lp));
      }
      pr.seq->prompt_logprobs_done = static_cast<size_t>(pr.first_pos + pr.count);
      row += pr.count;
    }
  } catch (const std::exception& e) {
    // An engine fault fails the requests of this step; the engine keeps serving others.
    LOG_ERROR("model step failed: {}", e.what());
    for (const auto& sr : so.scheduled) {
      auto it = seqs_.find(sr.request->request_id());
      if (it == seqs_.end()) continue;
      fail_group(*it->second->group, fmt::format("the model step failed: {}", e.what()));
    }
    return;
  }

  // banned_strings: a token that completes a banned phrase is not appended; its sequence rewinds.
  std::vector<std::pair<Seq*, BannedStringHit>> rewinds;
  for (size_t i = 0; i < sampled_seqs.size(); ++i) {
    Seq& s = *sampled_seqs[i];
    const SamplingParams& p = *s.group->req.params;
    StepResult r;
    r.request_id = s.req->request_id();
    const int32_t tok = samples[i].token;
    r.sampled_token_ids = {tok};
    generation_tokens_total_++;
    const int64_t num_out = s.req->num_output_tokens() + 1;
    if (num_out >= p.min_tokens) {
      const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), tok) != eos_ids_.end();
      const bool is_stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
      if ((is_eos && !p.ignore_eos) || is_stop_id) r.finish = RequestStatus::FinishedStopped;
    }
    if (s.banned && !s.finished) {
      const std::string text = s.detok ? s.detok->push(tok) : std::string();
      if (auto hit = s.banned->push(tok, text)) {
        r.sampled_token_ids.clear();
        r.finish = RequestStatus::Running;
        rewinds.emplace_back(&s, *hit);
      }
    }
    results.push_back(std::move(r));
  }
  const auto updates = scheduler_->update_from_output(so, results);
  std::unordered_map<const Request*, const RequestUpdate*> update_of;
  for (const auto& u : updates) update_of[u.request.get()] = &u;

  // Group the deltas per client request.
  std::unordered_map<Group*, RequestOutput> outs;
  std::vector<Group*> order;
  auto out_for = [&](Group& g) -> RequestOutput& {
    if (!outs.count(&g)) order.push_back(&g);
    return outs[&g];
  };
  for (auto& [s, hit] : rewinds) {
    if (!s->finished) rewind_banned(*s, hit, out_for(*s->group));
  }
  for (size_t i = 0; i < sampled_seqs.size(); ++i) {
    Seq& s = *sampled_seqs[i];
    if (s.finished) continue;  // aborted meanwhile
    auto found = update_of.find(s.req.get());
    if (found == update_of.end() || found->second->new_token_ids.empty()) continue;
    const RequestUpdate* uit = found->second;
    Group& g = *s.group;
    RequestOutput& out = out_for(g);
    if (g.num_cached_prompt_tokens == 0 && s.req->num_cached_tokens() > 0) {
      g.num_cached_prompt_tokens = s.req->num_cached_tokens();
    }
    const SamplingParams& p = *g.req.params;
    const SampleOutput& so_i = samples[i];
    s.cumulative_logprob += so_i.logprob;
    std::optional<PositionLogprobs> lp;
    if (p.logprobs) {
      lp.emplace();
      lp->token_id = so_i.token;
      lp->logprob = so_i.logprob;
      lp->rank = so_i.rank;
      for (const auto& t : so_i.top_logprobs) lp->top.push_back(TokenLogprob{t.token_id, t.logprob});
    }
    const int32_t tok = uit->new_token_ids.front();  // one token per step
    if (s.banned) {
      s.cumulative_at.push_back(s.cumulative_logprob);
      if (lp) s.held_logprobs.push_back(std::move(*lp));
      release_banned(s, /*all=*/uit->finished(), out);
    } else {
      const std::string text = s.detok ? s.detok->push(tok) : std::string();
      emit_token(s, tok, text, lp ? &*lp : nullptr, out);
    }
    if (!s.finished && uit->finished()) {
      const bool stopped = uit->status == RequestStatus::FinishedStopped;
      CompletionDelta& d = out.delta(s.index);
      if (stopped && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end()) {
        d.stop_reason = std::to_string(tok);
      }
      finish_seq(s, stopped ? "stop" : uit->status == RequestStatus::FinishedLength ? "length" : "abort", out);
    }
  }
  for (Group* g : beam_groups) {
    if (!g->beam->done) advance_beam(*g, out_for(*g));
  }
  for (Group* g : order) emit(*g, outs[g]);  // erases the finished groups
}

EngineStats Engine::stats() const {
  const SchedulerStats ss = scheduler_->stats();
  EngineStats s;
  s.num_running = ss.num_running;
  s.num_waiting = ss.num_waiting;
  s.num_swapped = ss.num_swapped;
  s.kv_cache_usage = ss.kv_cache_usage;
  s.cpu_swap_usage = ss.cpu_kv_cache_usage;
  s.prefix_cache_hit_rate = ss.prefix_cache_hit_rate;
  s.num_preemptions_total = ss.num_preemptions;
  s.num_swap_outs_total = swap_outs_total_;
  s.prompt_tokens_total = prompt_tokens_total_;
  s.generation_tokens_total = generation_tokens_total_;
  // Throughput over windows of at least a second (stats() is read after every step).
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_stats_time_).count();
  if (dt >= 1.0) {
    prompt_rate_ = static_cast<double>(prompt_tokens_total_ - last_prompt_tokens_) / dt;
    generation_rate_ = static_cast<double>(generation_tokens_total_ - last_generation_tokens_) / dt;
    last_stats_time_ = now;
    last_prompt_tokens_ = prompt_tokens_total_;
    last_generation_tokens_ = generation_tokens_total_;
  }
  s.prompt_tokens_per_s = prompt_rate_;
  s.generation_tokens_per_s = generation_rate_;
  return s;
}

ModelInfo Engine::model_info() const { return info_; }

}  // namespace cypris
