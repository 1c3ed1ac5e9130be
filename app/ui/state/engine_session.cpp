// EngineSession; see engine_session.h.
#include "app/ui/state/engine_session.h"

#include <exception>

#include "engine/common/log.h"

namespace cypris {

EngineSession::EngineSession(AppServices& services, UiQueue& queue, BackgroundJobs& jobs)
    : services_(services), queue_(queue), jobs_(jobs) {}

void EngineSession::load(const EngineConfig& cfg) {
  if (status_ == Status::Loading) return;
  unload();
  status_ = Status::Loading;
  error_.clear();
  progress_ = LoadProgress{0.0, "starting"};
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  const uint64_t gen = ++generation_;
  auto cancel = cancel_;
  jobs_.run("load", [this, cfg, gen, cancel](const std::atomic<bool>& stop) {
    (void)stop;  // the app cancels a running load through cancel_load() before it shuts down
    auto progress = [&](const LoadProgress& p) {
      queue_.post([this, gen, p] {
        if (gen == generation_ && status_ == Status::Loading) progress_ = p;
      });
    };
    std::shared_ptr<EngineClient> engine;
    std::string error;
    try {
      engine = services_.load_engine(cfg, progress, *cancel);
      if (!engine) error = "the engine returned no model";
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown error while loading";
    }
    ModelInfo info;
    if (engine) {
      try {
        info = engine->model_info();
      } catch (const std::exception& e) {
        error = e.what();
        engine.reset();
      }
    }
    queue_.post([this, gen, engine, info, error, cfg, cancel] {
      if (gen != generation_) return;  // unloaded or reloaded meanwhile
      if (*cancel && error.empty()) {
        status_ = Status::Unloaded;
        return;
      }
      if (!error.empty()) {
        if (!*cancel) LOG_ERROR("loading {} failed: {}", cfg.model.model, error);
        status_ = *cancel ? Status::Unloaded : Status::Failed;
        error_ = *cancel ? "" : error;
        return;
      }
      engine_ = engine;
      info_ = info;
      loaded_cfg_ = cfg;
      status_ = Status::Loaded;
      history_.clear();
      if (on_loaded) on_loaded(*this);
    });
  });
}

void EngineSession::cancel_load() {
  if (status_ != Status::Loading || !cancel_) return;
  *cancel_ = true;
  progress_.stage = "cancelling";
}

void EngineSession::unload() {
  if (status_ == Status::Loading) {
    cancel_load();
    ++generation_;
    status_ = Status::Unloaded;
    return;
  }
  if (engine_ && on_unloading) on_unloading();
  ++generation_;
  // Destroying an engine joins its thread and frees its memory: do it on a worker so the window
  // stays responsive (a generation worker may hold the last reference for a moment instead).
  if (engine_) {
    jobs_.run("unload", [old = std::move(engine_)](const std::atomic<bool>&) mutable { old.reset(); });
  }
  engine_.reset();
  info_ = ModelInfo{};
  status_ = Status::Unloaded;
  error_.clear();
}

void EngineSession::poll_stats(double now_s, double interval_s) {
  if (!engine_ || now_s - last_poll_s_ < interval_s || *poll_in_flight_) return;
  last_poll_s_ = now_s;
  *poll_in_flight_ = true;
  auto engine = engine_;
  auto flag = poll_in_flight_;
  const uint64_t gen = generation_;
  jobs_.run("stats", [this, engine, flag, gen](const std::atomic<bool>&) {
    EngineStats s{};
    bool ok = true;
    try {
      s = engine->stats();
    } catch (...) {
      ok = false;
    }
    *flag = false;
    if (ok) {
      queue_.post([this, s, gen] {
        if (gen == generation_) history_.push(s);
      });
    }
  });
}

}  // namespace cypris
