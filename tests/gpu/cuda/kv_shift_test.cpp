// --context-shift by rotation on the GPU: CudaBackend::move_kv_slots against the CPU backend's op
// (the reference, itself checked against a float64 formula in tests/unit/kernels/kv_shift_test.cpp)
// on random caches of every KV cache type, full and partial rotary, with overlapping moves. Values
// must move byte for byte; keys agree within two rounding units of the cache type (the GPU may fuse
// a multiply-add the CPU rounds twice).
#include "tests/gpu/cuda/gpu_test_util.h"

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaKvShift)

#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/backend.h"
#include "kernels/common/fp8.h"

namespace cypris {
namespace {

using namespace gpu_test;

std::vector<float> decode(const std::vector<uint8_t>& bytes, DType t, float scale) {
  if (t == DType::F8E4M3 || t == DType::F8E5M2) {
    std::vector<float> out(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i)
      out[i] = (t == DType::F8E4M3 ? fp8_e4m3_to_f32(bytes[i]) : fp8_e5m2_to_f32(bytes[i])) * scale;
    return out;
  }
  return to_f32(bytes, t);
}

std::vector<uint8_t> encode(const std::vector<float>& v, DType t, float scale) {
  if (t == DType::F8E4M3 || t == DType::F8E5M2) {
    std::vector<uint8_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      out[i] = t == DType::F8E4M3 ? f32_to_fp8_e4m3(v[i] / scale) : f32_to_fp8_e5m2(v[i] / scale);
    return out;
  }
  return store(v, t).bytes;
}

TEST(CudaKvShift, MoveKvSlotsMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  BackendOptions co;
  co.device = "cuda";
  auto gpu = make_backend(co);
  BackendOptions ho;
  ho.threads = 1;
  auto cpu = make_backend(ho);
  const int64_t blocks = 6, bs = 16, heads = 4, head_dim = 64;
  const int64_t n = blocks * bs * heads * head_dim;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
    for (int rot : {64, 32}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " rot " + std::to_string(rot));
      const float scale = (t == DType::F8E4M3 || t == DType::F8E5M2) ? 0.02f : 1.0f;
      std::vector<uint8_t> k = encode(randn(size_t(n), 1), t, scale), v = encode(randn(size_t(n), 2), t, scale);
      // A shift of a 90-token window in blocks 5, 2, 0, 4, 1, 3: keep 7, drop 30.
      const int64_t table[] = {5, 2, 0, 4, 1, 3};
      std::vector<int64_t> src_dst;
      std::vector<float> cos_sin;
      for (int64_t pos = 7; pos + 30 < 90; ++pos) {
        const int64_t old = pos + 30;
        src_dst.push_back(table[old / bs] * bs + old % bs);
        src_dst.push_back(table[pos / bs] * bs + pos % bs);
        for (int j = 0; j < rot / 2; ++j) cos_sin.push_back(std::cos(-30.0f * std::pow(500.0f, -2.0f * j / rot)));
        for (int j = 0; j < rot / 2; ++j) cos_sin.push_back(std::sin(-30.0f * std::pow(500.0f, -2.0f * j / rot)));
      }
      const std::vector<int64_t> shape = {blocks, bs, heads, head_dim};
      DeviceTensor ck = cpu->upload(k.data(), t, shape), cv = cpu->upload(v.data(), t, shape);
      DeviceTensor gk = gpu->upload(k.data(), t, shape), gv = gpu->upload(v.data(), t, shape);
      const KvCacheScales scales{scale, scale * 2};
      cpu->move_kv_slots(ck.view, cv.view, src_dst, cos_sin, rot, scales);
      gpu->move_kv_slots(gk.view, gv.view, src_dst, cos_sin, rot, scales);
      std::vector<uint8_t> want_k(k.size()), want_v(v.size()), got_k(k.size()), got_v(v.size());
      cpu->download(ck.view, want_k.data());
      cpu->download(cv.view, want_v.data());
      gpu->download(gk.view, got_k.data());
      gpu->download(gv.view, got_v.data());
      gpu->synchronize();
      EXPECT_EQ(got_v, want_v);
      const double u = t == DType::F32 ? 1e-5 : t == DType::F16 ? 1e-3 : t == DType::BF16 ? 8e-3
                     : t == DType::F8E4M3 ? 0.13 : 0.25;
      EXPECT_LT(norm_err(decode(got_k, t, scale), decode(want_k, t, scale)), u);
      EXPECT_NE(want_k, k);  // the moves changed something
    }
  }
}

}  // namespace
}  // namespace cypris
#endif
