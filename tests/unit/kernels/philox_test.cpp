// Philox4x32-10 (kernels/common/philox.h, shared with the GPU sampler) against the known-answer
// vectors of Random123 (kat_vectors, philox4x32_10; re-derived by tests/tools/philox_kat.py), and
// the sampler's uniform built on it.
#include "kernels/common/philox.h"

#include <gtest/gtest.h>

#include <set>

namespace cypris {
namespace {

void expect_kat(Philox4x32 ctr, uint32_t k0, uint32_t k1, Philox4x32 want) {
  const Philox4x32 got = philox4x32_10(ctr, k0, k1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

TEST(Philox, KnownAnswerZero) {
  expect_kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
}

TEST(Philox, KnownAnswerAllOnes) {
  expect_kat({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
             {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
}

TEST(Philox, KnownAnswerPi) {
  expect_kat({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
             {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, UniformIsAFunctionOfKeyAndPosition) {
  EXPECT_EQ(philox_uniform(42, 7), philox_uniform(42, 7));
  std::set<double> seen;
  double sum = 0.0;
  constexpr int kN = 20000;
  for (uint64_t pos = 0; pos < kN; ++pos) {
    const double u = philox_uniform(0x1234'5678'9abc'def0ull, pos);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    seen.insert(u);
    sum += u;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kN));  // no repeats along the stream
  EXPECT_NEAR(sum / kN, 0.5, 0.01);
  EXPECT_NE(philox_uniform(1, 0), philox_uniform(2, 0));                  // keys differ
  EXPECT_NE(philox_uniform(1, 0), philox_uniform(1, uint64_t{1} << 32));  // the counter's high word counts
}

TEST(Philox, UniformUsesTheFirstTwoWords) {
  // counter (0, 0, 0, 0), key (0, 0): words 0x6627e8d5 0xe169c58d -> top 53 bits / 2^53
  const uint64_t bits = (uint64_t{0x6627e8d5u} << 32 | 0xe169c58du) >> 11;
  EXPECT_EQ(philox_uniform(0, 0), static_cast<double>(bits) / 9007199254740992.0);
}

}  // namespace
}  // namespace cypris
