#include "engine/core/async_engine.h"

#include <algorithm>

#include "engine/common/error.h"
#include "engine/common/heap.h"
#include "engine/common/log.h"

namespace cypris {

AsyncEngine::AsyncEngine(const EngineConfig& cfg) : engine_(std::make_unique<Engine>(cfg)) {
  info_ = engine_->model_info();
  snapshot_ = engine_->stats();
  loras_ = engine_->loras();
  thread_ = std::thread([this] { loop(); });
  stats_logger_ = std::make_unique<StatsLogger>(cfg.logging, [this] { return stats(); });
}

AsyncEngine::~AsyncEngine() {
  stats_logger_.reset();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> AsyncEngine::submit(GenerateRequest req) {
  std::vector<GenerateRequest> one;
  one.push_back(std::move(req));
  return submit_all(std::move(one)).front();
}

std::vector<std::shared_ptr<RequestStream>> AsyncEngine::submit_all(std::vector<GenerateRequest> reqs) {
  if (reqs.empty()) return {};
  Submit s;
  for (const auto& r : reqs) {
    s.streams.push_back(std::make_shared<RequestStream>(r.request_id, [this](const std::string& id) { abort(id); }));
  }
  std::vector<std::shared_ptr<RequestStream>> streams = s.streams;
  s.reqs = std::move(reqs);
  std::future<void> accepted = s.accepted.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    CYPRIS_CHECK(!stop_, "the engine is shutting down");
    commands_.emplace_back(std::move(s));
  }
  cv_.notify_all();
  accepted.get();  // rethrows the engine's Error for a request that can never run
  return streams;
}

void AsyncEngine::add_all(Submit& s) {
  size_t added = 0;
  try {
    for (; added < s.reqs.size(); ++added) engine_->add_request(std::move(s.reqs[added]), s.streams[added]);
  } catch (...) {
    for (size_t i = 0; i < added; ++i) engine_->abort_request(s.streams[i]->request_id());
    throw;
  }
}

void AsyncEngine::abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.emplace_back(Abort{request_id});
  }
  cv_.notify_all();
}

void AsyncEngine::post(Command c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CYPRIS_CHECK(!stop_, "the engine is shutting down");
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
}

std::vector<LoraInfo> AsyncEngine::loras() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loras_;
}

void AsyncEngine::load_lora(const std::string& name, const std::string& path) {
  CYPRIS_CHECK(engine_->lora_enabled(), "LoRA adapters need --enable-lora (cannot load '{}')", name);
  LoraLoad c;
  c.name = name;
  c.adapter = std::make_shared<const LoraAdapter>(engine_->read_lora(path));
  std::future<void> done = c.done.get_future();
  post(std::move(c));
  done.get();  // rethrows the engine's Error (name taken, shapes)
}

bool AsyncEngine::unload_lora(const std::string& name) {
  LoraUnload c;
  c.name = name;
  std::future<bool> done = c.done.get_future();
  post(std::move(c));
  return done.get();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

void AsyncEngine::loop() {
  std::vector<std::shared_ptr<RequestStream>> live;  // to fail them at shutdown
  size_t live_after_prune = 64;
  bool busy = false;  // requests ran since the last time the engine was idle
  for (;;) {
    std::deque<Command> cmds;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Wakes at least once a second while idle so the stats snapshot (throughput) decays to 0.
      cv_.wait_for(lock, std::chrono::seconds(1),
                   [&] { return stop_ || !commands_.empty() || engine_->has_unfinished_requests(); });
      if (stop_) break;
      cmds.swap(commands_);
    }
    for (auto& c : cmds) {
      if (auto* s = std::get_if<Submit>(&c)) {
        try {
          add_all(*s);
          live.insert(live.end(), s->streams.begin(), s->streams.end());
          s->accepted.set_value();
        } catch (...) {
          s->accepted.set_exception(std::current_exception());
        }
      } else if (auto* l = std::get_if<LoraLoad>(&c)) {
        // The list is updated before the caller is answered, so loras() right after load_lora /
        // unload_lora returns (the desktop app's list, /v1/models after /v1/lora/load) sees the change.
        std::exception_ptr err;
        try {
          engine_->add_lora(l->name, l->adapter);
        } catch (...) {
          err = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          loras_ = engine_->loras();
        }
        if (err) {
          l->done.set_exception(err);
        } else {
          l->done.set_value();
        }
      } else if (auto* u = std::get_if<LoraUnload>(&c)) {
        const bool found = engine_->remove_lora(u->name);
        {
          std::lock_guard<std::mutex> lock(mu_);
          loras_ = engine_->loras();
        }
        u->done.set_value(found);
      } else {
        engine_->abort_request(std::get<Abort>(c).request_id);
      }
    }
    if (engine_->has_unfinished_requests()) {
      busy = true;
      try {
        engine_->step();
      } catch (const std::exception& e) {
        LOG_ERROR("engine step failed: {}", e.what());
      }
    }
    if (busy && !engine_->has_unfinished_requests()) {
      // Gone idle: what the finished requests held (prompts, outputs, grammars) goes back to the
      // system instead of staying in the heap's free lists.
      busy = false;
      release_free_heap();
      idle_trims_.fetch_add(1);
    }
    // Pruned when it has doubled since the last pruning: linear over a run, not per step.
    if (live.size() >= 2 * live_after_prune) {
      std::erase_if(live, [](const auto& s) { return s.use_count() == 1 || s->done(); });
      live_after_prune = std::max<size_t>(64, live.size());
    }
    EngineStats st = engine_->stats();
    std::lock_guard<std::mutex> lock(mu_);
    snapshot_ = st;
  }
  // Shutdown: the pending submissions and running requests end with an error.
  for (auto& c : commands_) {
    const auto down = std::make_exception_ptr(Error("the engine is shutting down"));
    if (auto* s = std::get_if<Submit>(&c)) s->accepted.set_exception(down);
    if (auto* l = std::get_if<LoraLoad>(&c)) l->done.set_exception(down);
    if (auto* u = std::get_if<LoraUnload>(&c)) u->done.set_exception(down);
  }
  for (auto& s : live) {
    RequestOutput out;
    out.request_id = s->request_id();
    out.finished = true;
    out.error = "the engine shut down";
    s->push(std::move(out));
  }
}

}  // namespace cypris
