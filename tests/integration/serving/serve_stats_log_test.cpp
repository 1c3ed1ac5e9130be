// `cypris --no-ui` (serve_forever) with a real AsyncEngine logs its periodic stats line once per
// interval: one logger, not one in the engine and another in serve_forever (which printed every
// line twice). The lines are told apart by the thread that logged them.
#include <gtest/gtest.h>
#include <pthread.h>
#include <spdlog/sinks/base_sink.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <set>
#include <thread>

#include "app/server/serve_main.h"
#include "engine/common/log.h"
#include "engine/core/async_engine.h"

namespace cypris {
namespace {

// Records the thread of every stats line.
class StatsLineSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Waits (bounded) until n stats lines were logged; returns the threads that logged them.
  std::set<size_t> wait_for_lines(size_t n) {
    std::unique_lock<std::mutex> lock(seen_mu_);
    cv_.wait_for(lock, std::chrono::seconds(60), [&] { return threads_.size() >= n; });
    return std::set<size_t>(threads_.begin(), threads_.end());
  }
  size_t lines() {
    std::lock_guard<std::mutex> lock(seen_mu_);
    return threads_.size();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string_view text(msg.payload.data(), msg.payload.size());
    if (text.find("Avg prompt throughput") == std::string_view::npos) return;
    {
      std::lock_guard<std::mutex> lock(seen_mu_);
      threads_.push_back(msg.thread_id);
    }
    cv_.notify_all();
  }
  void flush_() override {}

 private:
  std::mutex seen_mu_;
  std::condition_variable cv_;
  std::vector<size_t> threads_;
};

TEST(ServeStatsLog, EachStatsLineIsLoggedOnce) {
  auto sink = std::make_shared<StatsLineSink>();
  add_log_sink(sink);
  EngineConfig cfg;
  cfg.model.model = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  cfg.model.dtype = "float32";
  cfg.device.device = "cpu";
  cfg.device.threads = 1;
  cfg.cache.cpu_kvcache_space = 0.05;
  cfg.logging.log_stats_interval = 0.02;
  cfg.server.host = "127.0.0.1";
  cfg.server.port = 0;
  int code = -1;
  std::thread serving([&] {
    code = serve_forever(
        cfg, [](const EngineConfig& c) -> std::shared_ptr<EngineClient> { return std::make_shared<AsyncEngine>(c); });
  });
  // Two loggers on the same interval would each have logged about half of these lines.
  const std::set<size_t> threads = sink->wait_for_lines(6);
  const size_t lines = sink->lines();
  // serve_forever waits in sigwait with SIGTERM blocked in its thread: this ends it cleanly.
  pthread_kill(serving.native_handle(), SIGTERM);
  serving.join();
  remove_log_sink(sink);
  EXPECT_EQ(code, 0);
  ASSERT_GE(lines, 6u) << "the stats line was not logged";
  EXPECT_EQ(threads.size(), 1u) << "stats lines came from " << threads.size() << " loggers";
}

}  // namespace
}  // namespace cypris
