#include <gtest/gtest.h>

#include "app/cli/bench_serving.h"

using cypris::cli::summarize_ms;

TEST(BenchServingStats, PercentilesInterpolateLikeNumpy) {
  auto s = summarize_ms({5, 1, 4, 2, 3});
  EXPECT_DOUBLE_EQ(s.mean, 3.0);
  EXPECT_DOUBLE_EQ(s.p50, 3.0);
  EXPECT_NEAR(s.p90, 4.6, 1e-12);   // rank 0.9 * 4 = 3.6 -> 4 + 0.6 * (5 - 4)
  EXPECT_NEAR(s.p99, 4.96, 1e-12);  // rank 3.96
  auto empty = summarize_ms({});
  EXPECT_DOUBLE_EQ(empty.mean, 0.0);
  auto one = summarize_ms({7});
  EXPECT_DOUBLE_EQ(one.p99, 7.0);
}
