// Download progress aggregation: totals, rate over the window, ETA; hand-computed numbers.
#include "app/ui/state/download_progress.h"

#include <gtest/gtest.h>

namespace cypris {
namespace {

TEST(DownloadProgress, TotalsRateAndEta) {
  DownloadProgress p(10.0);
  p.start({{"a.safetensors", 1000}, {"config.json", 200}}, 0.0);
  EXPECT_EQ(p.bytes_total(), 1200);
  EXPECT_FLOAT_EQ(p.fraction(), 0.0f);
  p.update({"a.safetensors", 300, 1000, false}, 1.0);
  p.update({"a.safetensors", 600, 1000, false}, 2.0);
  EXPECT_EQ(p.bytes_done(), 600);
  EXPECT_FLOAT_EQ(p.fraction(), 0.5f);
  EXPECT_DOUBLE_EQ(p.rate_bytes_per_s(), 300.0);  // 600 bytes over 2 s
  ASSERT_TRUE(p.eta_seconds().has_value());
  EXPECT_DOUBLE_EQ(*p.eta_seconds(), 2.0);  // 600 left at 300 B/s
  EXPECT_FLOAT_EQ(p.files()[0].fraction(), 0.6f);
  EXPECT_FALSE(p.all_finished());
  p.update({"a.safetensors", 1000, 1000, true}, 3.0);
  p.update({"config.json", 200, 200, true}, 3.0);
  EXPECT_TRUE(p.all_finished());
  EXPECT_DOUBLE_EQ(*p.eta_seconds(), 0.0);
}

TEST(DownloadProgress, RateUsesOnlyTheRecentWindow) {
  DownloadProgress p(2.0);
  p.start({{"w.bin", 100000}}, 0.0);
  p.update({"w.bin", 10000, 100000, false}, 1.0);   // fast at first: 10000 B/s
  p.update({"w.bin", 11000, 100000, false}, 10.0);  // then slow
  p.update({"w.bin", 12000, 100000, false}, 11.0);
  p.update({"w.bin", 13000, 100000, false}, 12.0);
  // Window of 2 s before t=12 keeps the sample at t=10 (and none older): 2000 B over 2 s.
  EXPECT_DOUBLE_EQ(p.rate_bytes_per_s(), 1000.0);
  EXPECT_DOUBLE_EQ(*p.eta_seconds(), 87.0);
}

TEST(DownloadProgress, UnknownSizesGiveNoEtaAndCountFiles) {
  DownloadProgress p;
  p.start({{"a", -1}, {"b", -1}}, 0.0);
  p.update({"a", 50, -1, true}, 1.0);
  EXPECT_EQ(p.bytes_total(), -1);
  EXPECT_FALSE(p.eta_seconds().has_value());
  EXPECT_FLOAT_EQ(p.fraction(), 0.5f);  // one of two files
}

TEST(DownloadProgress, Formatting) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1500), "1.50 KB");
  EXPECT_EQ(format_bytes(820000000), "820 MB");
  EXPECT_EQ(format_bytes(15300000000), "15.3 GB");
  EXPECT_EQ(format_duration(42), "42 s");
  EXPECT_EQ(format_duration(185), "3 min 05 s");
  EXPECT_EQ(format_duration(3720), "1 h 02 min");
}

}  // namespace
}  // namespace cypris
