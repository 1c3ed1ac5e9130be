// Dummy weights (kernels/common/dummy_fill.h, kernels/cpu/dummy_fill.h): the values are a pure
// function of (seed, tensor name, element index), in range, the same whatever the thread count or
// the run a slice is cut into, and unchanged from the formula dummy weights had before they could
// be generated on the device (so runs on dummy weights stay comparable across versions). The CUDA
// kernel evaluates the same dummy_value; tests/gpu/cuda/dummy_fill_test.cpp compares the two.
#include "kernels/cpu/dummy_fill.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

uint64_t key_of(uint64_t seed, const std::string& name) {
  return dummy_key(seed, name.data(), name.size());
}

// The formula as weights.cpp wrote it inline before (commit 26fa2ac), kept here as the reference.
float reference_value(uint64_t seed, const std::string& name, const std::vector<int64_t>& full_shape, uint64_t index) {
  auto splitmix64 = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  uint64_t h = seed * 0x100000001b3ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  const int64_t fan_in = full_shape.empty() ? 1 : full_shape.back();
  const float a = full_shape.size() >= 2 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.02f;
  const uint64_t r = splitmix64(h ^ index);
  return a * (static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f);
}

TEST(DummyFill, ValuesEqualTheFormulaDummyWeightsAlwaysHad) {
  const std::string name = "model.layers.3.self_attn.q_proj.weight";
  const std::vector<int64_t> shape = {64, 4096};
  const uint64_t key = key_of(11, name);
  const float scale = dummy_scale(2, 4096);
  for (uint64_t i : {0ull, 1ull, 4095ull, 4096ull, 262143ull, (1ull << 33) + 5}) {
    EXPECT_EQ(dummy_value(key, scale, i), reference_value(11, name, shape, i)) << i;
  }
  EXPECT_EQ(dummy_scale(1, 77), 0.02f);  // biases
  EXPECT_EQ(dummy_scale(0, 1), 0.02f);
}

TEST(DummyFill, DeterministicPerSeedAndInRange) {
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  const int64_t rows = 96, cols = 512;
  const float scale = dummy_scale(2, cols);
  DummyFill run;
  run.key = key_of(7, name);
  run.scale = scale;
  run.rows = 1;
  run.row_len = rows * cols;
  run.src_row_stride = run.row_len;
  std::vector<float> a(rows * cols), b(rows * cols), other(rows * cols);
  ThreadPool one(1), four(4);
  dummy_fill_cpu(a.data(), DType::F32, run, &one);
  dummy_fill_cpu(b.data(), DType::F32, run, &four);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "depends on the thread count";
  DummyFill seed8 = run;
  seed8.key = key_of(8, name);
  dummy_fill_cpu(other.data(), DType::F32, seed8, &four);
  int64_t same = 0;
  double sum = 0, sum_sq = 0;
  float lo = 0, hi = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same += a[i] == other[i];
    sum += a[i];
    sum_sq += double(a[i]) * a[i];
    lo = std::min(lo, a[i]);
    hi = std::max(hi, a[i]);
  }
  EXPECT_LT(same, 10) << "another seed gives other values";
  EXPECT_GE(lo, -scale);
  EXPECT_LT(hi, scale);
  // Uniform on [-a, a): mean 0, variance a^2 / 3; the extremes come close to the bounds.
  const double n = double(a.size());
  EXPECT_NEAR(sum / n, 0.0, 0.01 * scale);
  EXPECT_NEAR(sum_sq / n, double(scale) * scale / 3.0, 0.02 * scale * scale);
  EXPECT_LT(lo, -0.99f * scale);
  EXPECT_GT(hi, 0.99f * scale);
}

TEST(DummyFill, StridedRunsAreSlicesOfTheFullTensor) {
  // Columns [24, 40) of a [10, 64] tensor (a row-parallel shard), written after 5 other elements.
  const uint64_t key = key_of(3, "w");
  const float scale = dummy_scale(2, 64);
  DummyFill run;
  run.key = key;
  run.scale = scale;
  run.dst_offset = 5;
  run.rows = 10;
  run.row_len = 16;
  run.src_offset = 24;
  run.src_row_stride = 64;
  std::vector<float> out(5 + 10 * 16, -7.0f);
  dummy_fill_cpu(out.data(), DType::F32, run);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], -7.0f) << "wrote before dst_offset";
  for (int r = 0; r < 10; ++r) {
    for (int c = 0; c < 16; ++c) {
      ASSERT_EQ(out[5 + r * 16 + c], dummy_value(key, scale, uint64_t(r * 64 + 24 + c))) << r << "," << c;
    }
  }
}

TEST(DummyFill, SixteenBitWeightsAreTheFp32ValuesRounded) {
  // Long enough to cross the CPU fill's internal chunks, with rows that straddle them.
  DummyFill run;
  run.key = key_of(1, "model.embed_tokens.weight");
  run.scale = dummy_scale(2, 4099);
  run.rows = 37;
  run.row_len = 4099;
  run.src_offset = 4099 * 3;
  run.src_row_stride = 4099;
  const size_t n = 37 * 4099;
  std::vector<float> f32(n);
  dummy_fill_cpu(f32.data(), DType::F32, run);
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> got(n), want(n);
    dummy_fill_cpu(got.data(), t, run);
    convert_from_f32(f32.data(), t, want.data(), static_cast<int64_t>(n));
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 2), 0) << dtype_name(t);
  }
}

}  // namespace
}  // namespace cypris
