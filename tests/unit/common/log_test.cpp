#include "engine/common/log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

#include "engine/common/error.h"
#include "engine/core/stats.h"

namespace cypris {
namespace {

TEST(Log, ClipCountsCharactersAndNeverSplitsOne) {
  EXPECT_EQ(clip_for_log("hello", 0), "hello");
  EXPECT_EQ(clip_for_log("hello", 3), "hel...");
  EXPECT_EQ(clip_for_log("héllo", 2), "hé...");  // é is two bytes
  EXPECT_EQ(clip_for_log("日本語", 5), "日本語");
}

TEST(Log, LevelNamesAreCheckedAndHonoured) {
  EXPECT_THROW(set_log_level("loud"), Error);
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  add_log_sink(sink);
  set_log_level("warning");
  LOG_INFO("hidden line");
  LOG_WARN("shown line");
  set_log_level("info");
  remove_log_sink(sink);
  EXPECT_EQ(out.str().find("hidden line"), std::string::npos);
  EXPECT_NE(out.str().find("shown line"), std::string::npos);
}

TEST(Log, RequestLoggingHonoursTheOptions) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  add_log_sink(sink);
  LoggingOptions opts;
  opts.max_log_len = 4;
  log_request(opts, "req-1", "abcdefgh", "max_tokens=5");
  opts.disable_log_requests = true;
  log_request(opts, "req-2", "zzzz", "");
  remove_log_sink(sink);
  EXPECT_NE(out.str().find("req-1"), std::string::npos);
  EXPECT_NE(out.str().find("abcd..."), std::string::npos);
  EXPECT_EQ(out.str().find("abcde"), std::string::npos);
  EXPECT_EQ(out.str().find("req-2"), std::string::npos);
}

TEST(Log, StatsLineIsPrintedUnlessDisabled) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  add_log_sink(sink);
  LoggingOptions opts;
  opts.log_stats_interval = 0.01;
  std::atomic<int> calls{0};
  {
    StatsLogger logger(opts, [&] {
      ++calls;
      EngineStats s;
      s.num_running = 3;
      s.kv_cache_usage = 0.5;
      return s;
    });
    // Bounded: a logger that never fires fails here instead of hanging the suite.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (calls.load() < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    EXPECT_GE(calls.load(), 2);
  }
  opts.disable_log_stats = true;
  int before = calls.load();
  { StatsLogger off(opts, [&] { ++calls; return EngineStats{}; }); }
  remove_log_sink(sink);
  EXPECT_EQ(calls.load(), before);
  EXPECT_NE(out.str().find("Running: 3 reqs"), std::string::npos);
  EXPECT_NE(out.str().find("KV cache usage: 50.0%"), std::string::npos);
}

}  // namespace
}  // namespace cypris
