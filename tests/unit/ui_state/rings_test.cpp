// Ring buffers of the Logs and Stats panels: bounded size, order, level filter, PlotLines layout.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "app/ui/state/log_buffer.h"
#include "app/ui/state/stats_history.h"

namespace cypris {
namespace {

TEST(LogBuffer, KeepsTheNewestLinesUpToCapacity) {
  LogBuffer b(3);
  for (int i = 1; i <= 5; ++i) b.push(LogLevel::Info, "t", "line " + std::to_string(i));
  auto lines = b.lines(LogLevel::Trace);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].text, "line 3");
  EXPECT_EQ(lines[2].text, "line 5");
  EXPECT_EQ(lines[2].seq, 5u);
  EXPECT_EQ(b.total_pushed(), 5u);
}

TEST(LogBuffer, FiltersByMinimumLevelAndLimit) {
  LogBuffer b(10);
  b.push(LogLevel::Debug, "t", "d");
  b.push(LogLevel::Info, "t", "i");
  b.push(LogLevel::Warn, "t", "w");
  b.push(LogLevel::Error, "t", "e");
  auto warn_up = b.lines(LogLevel::Warn);
  ASSERT_EQ(warn_up.size(), 2u);
  EXPECT_EQ(warn_up[0].text, "w");
  EXPECT_EQ(warn_up[1].text, "e");
  auto last_two = b.lines(LogLevel::Trace, 2);
  ASSERT_EQ(last_two.size(), 2u);
  EXPECT_EQ(last_two[0].text, "w");
}

TEST(LogBuffer, SpdlogSinkDeliversMessageAndLevel) {
  auto buffer = std::make_shared<LogBuffer>(10);
  auto sink = std::make_shared<LogBufferSink>(buffer);
  spdlog::logger log("ui-test", sink);
  log.set_level(spdlog::level::trace);
  log.warn("disk {} almost full", "/tmp");
  log.debug("detail");
  auto lines = buffer->lines(LogLevel::Trace);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].level, LogLevel::Warn);
  EXPECT_EQ(lines[0].text, "disk /tmp almost full");
  EXPECT_EQ(lines[0].time.size(), 12u);  // HH:MM:SS.mmm
  EXPECT_EQ(lines[1].level, LogLevel::Debug);
}

TEST(RingSeries, OrderAndPlotOffsetBeforeAndAfterWrapping) {
  RingSeries r(3);
  r.push(1);
  r.push(2);
  EXPECT_EQ(r.plot_count(), 2);
  EXPECT_EQ(r.plot_offset(), 0);
  EXPECT_EQ(r.ordered(), (std::vector<float>{1, 2}));
  r.push(3);
  r.push(4);  // drops 1
  EXPECT_EQ(r.ordered(), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(r.latest(), 4);
  EXPECT_EQ(r.max(), 4);
  // PlotLines reads data[(offset + i) % count]: must give the oldest-first order.
  std::vector<float> via_plot;
  for (int i = 0; i < r.plot_count(); ++i) via_plot.push_back(r.data()[(r.plot_offset() + i) % r.plot_count()]);
  EXPECT_EQ(via_plot, r.ordered());
}

TEST(StatsHistory, RecordsKvUsageAsPercentAndQueues) {
  StatsHistory h(4);
  EngineStats s;
  s.kv_cache_usage = 0.25;
  s.num_running = 3;
  s.num_waiting = 1;
  s.generation_tokens_per_s = 42.5;
  h.push(s);
  EXPECT_FLOAT_EQ(h.kv_usage.latest(), 25.0f);
  EXPECT_EQ(h.running.latest(), 3.0f);
  EXPECT_EQ(h.waiting.latest(), 1.0f);
  EXPECT_FLOAT_EQ(h.gen_throughput.latest(), 42.5f);
  h.clear();
  EXPECT_TRUE(h.empty());
}

}  // namespace
}  // namespace cypris
