// Backend::grouped_linear (a MoE layer's projection: each expert's weight over its own run of rows)
// on the CPU backend: the grouped kernels equal the Backend's default of one linear() per run, bit
// for bit, for 16-bit and quantized experts, decode-sized runs and larger ones; rows in no run are
// left as they were; malformed groups are refused with a message that says what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/common/error.h"
#include "kernels/cpu/gemm.h"
#include "tests/support/quant_weights.h"

namespace cypris {
namespace {

DeviceTensor weight(CpuBackend& be, DType t, int64_t n, int64_t k, uint32_t seed) {
  HostTensor h;
  h.dtype = t;
  h.shape = {n, k};
  if (dtype_is_quantized(t)) {
    const auto bytes = test::random_weights(t, n, k, seed);
    h.buffer = Buffer(bytes.size());
    std::memcpy(h.buffer.data(), bytes.data(), bytes.size());
  } else {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, 0.1f);
    std::vector<float> f(n * k);
    for (auto& v : f) v = d(g);
    h.buffer = Buffer(dtype_nbytes(t, n * k));
    convert_from_f32(f.data(), t, h.buffer.data(), n * k);
  }
  return be.upload_weight(std::move(h));
}

std::vector<float> run(CpuBackend& be, bool grouped, const Tensor& x, const std::vector<LinearGroup>& groups,
                       int64_t n) {
  std::vector<float> poison(x.shape[0] * n, NAN);
  DeviceTensor out = be.upload(poison.data(), DType::F32, {x.shape[0], n});
  if (grouped) {
    be.grouped_linear(x, groups, out.view);
  } else {
    be.Backend::grouped_linear(x, groups, out.view);  // one linear() per run
  }
  std::vector<float> y(poison.size());
  be.download(out.view, y.data());
  return y;
}

TEST(GroupedLinear, EqualsOneLinearPerRunOnSixteenBitAndQuantizedExperts) {
  CpuBackend be(2);
  const int64_t k = 512, n = 40, m = 24;
  const std::vector<std::pair<int64_t, int64_t>> runs = {{0, 1}, {1, 2}, {3, 0}, {4, 9}, {13, 8}};  // 21..23: none
  std::mt19937 g(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> xs(m * k);
  for (auto& v : xs) v = d(g);
  DeviceTensor x = be.upload(xs.data(), DType::F32, {m, k});
  for (DType t : {DType::BF16, DType::F16, DType::F32, DType::Q4_K, DType::Q8_0, DType::Q6_K}) {
    std::vector<DeviceTensor> w;
    std::vector<LinearGroup> groups;
    for (size_t e = 0; e < runs.size(); ++e) w.push_back(weight(be, t, n, k, 10 + static_cast<uint32_t>(e)));
    for (size_t e = 0; e < runs.size(); ++e) groups.push_back({&w[e].view, runs[e].first, runs[e].second});
    const auto got = run(be, true, x.view, groups, n);
    const auto want = run(be, false, x.view, groups, n);
    for (int64_t i = 0; i < m * n; ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << dtype_name(t) << ": row " << i / n << " is in no run but was written";
      } else {
        ASSERT_EQ(got[i], want[i]) << dtype_name(t) << ": row " << i / n << " col " << i % n;
      }
    }
  }
}

TEST(GroupedLinear, RefusesMalformedGroups) {
  CpuBackend be(1);
  DeviceTensor a = weight(be, DType::BF16, 8, 32, 1), b = weight(be, DType::F16, 8, 32, 2);
  DeviceTensor wide = weight(be, DType::BF16, 9, 32, 3);
  DeviceTensor x = be.zeros(DType::F32, {6, 32}), out = be.zeros(DType::F32, {6, 8});
  auto message = [&](const std::vector<LinearGroup>& groups) {
    try {
      be.grouped_linear(x.view, groups, out.view);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{&a.view, 0, 3}, {&a.view, 2, 2}}).find("overlap at row 2"), std::string::npos);
  EXPECT_NE(message({{&a.view, 0, 3}, {&b.view, 3, 2}}).find("weight is float16"), std::string::npos);
  EXPECT_NE(message({{&a.view, 4, 3}}).find("rows [4, 7) outside [0, 6)"), std::string::npos);
  EXPECT_NE(message({{&wide.view, 0, 2}}).find("group 0: w [9, 32]"), std::string::npos);
  EXPECT_NE(message({{nullptr, 0, 2}}).find("has no weight"), std::string::npos);
  EXPECT_EQ(message({}), "no error");  // nothing to do
}

}  // namespace
}  // namespace cypris
