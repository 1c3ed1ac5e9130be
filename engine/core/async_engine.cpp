#include "engine/core/async_engine.h"

#include "engine/common/error.h"
#include "engine/common/log.h"

namespace cypris {

AsyncEngine::AsyncEngine(const EngineConfig& cfg) : engine_(std::make_unique<Engine>(cfg)) {
  info_ = engine_->model_info();
  snapshot_ = engine_->stats();
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
  auto stream = std::make_shared<RequestStream>(req.request_id, [this](const std::string& id) { abort(id); });
  std::future<void> accepted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    CYPRIS_CHECK(!stop_, "the engine is shutting down");
    Submit s{std::move(req), stream, {}};
    accepted = s.accepted.get_future();
    commands_.emplace_back(std::move(s));
  }
  cv_.notify_all();
  accepted.get();  // rethrows the engine's Error for a request that can never run
  return stream;
}

void AsyncEngine::abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.emplace_back(Abort{request_id});
  }
  cv_.notify_all();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

void AsyncEngine::loop() {
  std::vector<std::shared_ptr<RequestStream>> live;  // to fail them at shutdown
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
          engine_->add_request(std::move(s->req), s->stream);
          live.push_back(s->stream);
          s->accepted.set_value();
        } catch (...) {
          s->accepted.set_exception(std::current_exception());
        }
      } else {
        engine_->abort_request(std::get<Abort>(c).request_id);
      }
    }
    if (engine_->has_unfinished_requests()) {
      try {
        engine_->step();
      } catch (const std::exception& e) {
        LOG_ERROR("engine step failed: {}", e.what());
      }
    }
    std::erase_if(live, [](const auto& s) { return s.use_count() == 1 || s->done(); });
    EngineStats st = engine_->stats();
    std::lock_guard<std::mutex> lock(mu_);
    snapshot_ = st;
  }
  // Shutdown: the pending submissions and running requests end with an error.
  for (auto& c : commands_) {
    if (auto* s = std::get_if<Submit>(&c)) {
      s->accepted.set_exception(std::make_exception_ptr(Error("the engine is shutting down")));
    }
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
