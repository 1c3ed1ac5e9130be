// A two-sample chi-square check that two samplers draw the same tokens, for the speculative
// decoding tests that compare verified tokens with tokens sampled without a draft.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

// got and want: the tokens each request (by id) generated with a draft and without, exactly length
// of them. At each output position in positions, the tokens over all requests have the same
// distribution (expect_same_distribution with min_cells).
inline void expect_same_distribution_at(const std::map<std::string, std::vector<int32_t>>& got,
                                        const std::map<std::string, std::vector<int32_t>>& want,
                                        const std::vector<size_t>& positions, size_t length, int min_cells) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, tokens] : got) {
    ASSERT_EQ(tokens.size(), length) << id;
    ASSERT_EQ(want.at(id).size(), length) << id;
  }
  for (size_t pos : positions) {
    SCOPED_TRACE("output position " + std::to_string(pos));
    std::map<int32_t, std::pair<int, int>> counts;  // token -> (with the draft, without)
    for (const auto& [id, tokens] : got) {
      counts[tokens[pos]].first++;
      counts[want.at(id)[pos]].second++;
    }
    expect_same_distribution(counts, min_cells);
  }
}

}  // namespace cypris::test
