// CpuBackend with GGUF-quantized weights: linear and embedding take a quantized [rows, row_len]
// tensor as a model would hand it over (upload_weight of the file's bytes), agree with the fp64
// product of the dequantized weights within the 8-bit-activation bound (docs/quantization.md), and
// refuse a row length that is not a whole number of blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/common/error.h"
#include "engine/loader/weights.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "tests/support/quant_weights.h"

namespace cypris {
namespace {

DeviceTensor upload_quantized(CpuBackend& be, DType t, int64_t n, int64_t k, const std::vector<uint8_t>& bytes) {
  HostTensor h;
  h.dtype = t;
  h.shape = {n, k};
  h.buffer = Buffer(bytes.size());
  std::memcpy(h.buffer.data(), bytes.data(), bytes.size());
  return be.upload_weight(std::move(h));
}

TEST(CpuBackendQuantized, LinearAndEmbeddingOnQ4KAndQ8_0) {
  CpuBackend be(2);
  for (DType t : {DType::Q4_K, DType::Q8_0, DType::Q6_K}) {
    const int64_t n = 48, k = 512, m = 5;
    const auto wbytes = test::random_weights(t, n, k, 3);
    ASSERT_EQ(wbytes.size(), dtype_nbytes(t, n * k));
    DeviceTensor w = upload_quantized(be, t, n, k, wbytes);
    ASSERT_EQ(w.view.nbytes(), wbytes.size());
    std::vector<float> wd(n * k);
    quant::dequantize_row(t, wbytes.data(), wd.data(), n * k);

    std::mt19937 g(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(m * k);
    for (auto& v : x) v = nd(g);
    DeviceTensor dx = be.upload(x.data(), DType::F32, {m, k});
    std::vector<float> poison(m * n, NAN);
    DeviceTensor dy = be.upload(poison.data(), DType::F32, {m, n});
    be.linear(dx.view, w.view, nullptr, dy.view);
    std::vector<float> y(m * n);
    be.download(dy.view, y.data());
    const int block = quant::act_block(t);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, bound = 0, mag = 0;
        for (int64_t c = 0; c < k; c += block) {
          double amax = 0;
          for (int l = 0; l < block; ++l) amax = std::max(amax, double(std::abs(x[i * k + c + l])));
          for (int l = 0; l < block; ++l) {
            const double wv = wd[j * k + c + l], xv = x[i * k + c + l];
            exact += wv * xv;
            mag += std::abs(wv * xv);
            bound += std::abs(wv) * amax / 127.0 / 2;
          }
        }
        ASSERT_NEAR(y[i * n + j], exact, bound * 1.0001 + 1e-5 * mag + 1e-6) << dtype_name(t) << " " << i << "," << j;
      }
    }

    const std::vector<int32_t> ids = {7, 0, 47};
    DeviceTensor dids = be.upload(ids.data(), DType::I32, {3});
    std::vector<float> epoison(3 * k, NAN);
    DeviceTensor de = be.upload(epoison.data(), DType::F32, {3, k});
    be.embedding(dids.view, w.view, de.view);
    std::vector<float> e(3 * k);
    be.download(de.view, e.data());
    for (int r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < k; ++c) ASSERT_EQ(e[r * k + c], wd[ids[r] * k + c]) << dtype_name(t);
    }
  }
}

TEST(CpuBackendQuantized, RefusesPartialBlocksAndBadIds) {
  CpuBackend be(1);
  const auto wbytes = test::random_weights(DType::Q8_0, 4, 64, 1);
  // A row of 48 Q8_0 values is not a whole number of 32-blocks.
  HostTensor h;
  h.dtype = DType::Q8_0;
  h.shape = {4, 64};
  h.buffer = Buffer(wbytes.size());
  std::memcpy(h.buffer.data(), wbytes.data(), wbytes.size());
  DeviceTensor w = be.upload_weight(std::move(h));
  std::vector<float> x(2 * 64, 1.0f);
  DeviceTensor dx = be.upload(x.data(), DType::F32, {2, 64});
  DeviceTensor dy = be.zeros(DType::F32, {2, 4});
  Tensor w48 = w.view;
  w48.shape = {4, 48};
  Tensor x48 = dx.view;
  x48.shape = {2, 48};
  EXPECT_THROW(be.linear(x48, w48, nullptr, dy.view), Error);
  const std::vector<int32_t> bad = {4};
  DeviceTensor dids = be.upload(bad.data(), DType::I32, {1});
  DeviceTensor de = be.zeros(DType::F32, {1, 64});
  EXPECT_THROW(be.embedding(dids.view, w.view, de.view), Error);
}

}  // namespace
}  // namespace cypris
