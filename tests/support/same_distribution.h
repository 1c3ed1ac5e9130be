// A two-sample chi-square check that two samplers draw the same tokens, for the speculative
// decoding tests that compare verified tokens with tokens sampled without a draft.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

namespace cypris::test {

// counts: token -> (times drawn by sampler a, times drawn by sampler b), over as many draws each.
// Two-sample chi-square with the cells under 10 pooled, at the 0.1% point (Wilson-Hilferty); fails
// when fewer than min_cells cells remain (the position is then not random enough to say anything).
inline void expect_same_distribution(const std::map<int32_t, std::pair<int, int>>& counts, int min_cells) {
  double chi = 0.0;
  int cells = 0;
  std::pair<int, int> pooled{0, 0};
  auto add = [&](int a, int b) {
    const double e = (a + b) / 2.0;
    chi += (a - e) * (a - e) / e + (b - e) * (b - e) / e;
    ++cells;
  };
  for (const auto& [tok, ab] : counts) {
    if (ab.first + ab.second < 10) {
      pooled.first += ab.first;
      pooled.second += ab.second;
    } else {
      add(ab.first, ab.second);
    }
  }
  if (pooled.first + pooled.second > 0) add(pooled.first, pooled.second);
  ASSERT_GE(cells, min_cells) << "the position is not random enough to say anything";
  const double k = cells - 1;
  const double limit = k * std::pow(1.0 - 2.0 / (9.0 * k) + 3.09 * std::sqrt(2.0 / (9.0 * k)), 3.0);
  EXPECT_LT(chi, limit) << cells << " cells";
}

}  // namespace cypris::test
