// CudaBackend::rotary_and_write_kv_cache (one fused launch) against the same backend's two separate
// ops (rotary, then write_kv_cache; each checked against the CPU in kernels_test.cpp), bit for bit:
// q and k rotated in place inside one strided qkv buffer, and the K/V caches (poisoned first), for
// fp32 and bf16 activations, every cache type, full and partial rotary, GQA, a position outside the
// table (left unrotated) and a padding slot (not stored). Skips itself without a GPU. Written
// without a GPU: never ran yet.
#include <gtest/gtest.h>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaRotaryCache)
#ifdef CYPRIS_HAVE_CUDA

std::vector<uint8_t> bytes_of(CudaBackend& be, const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  be.download(t, out.data());
  return out;
}

void check(DType act, DType cache, int head_dim, int rot_dim) {
  CudaBackendOptions o;
  o.activation_dtype = act;
  CudaBackend be(o);
  const int hq = 8, hkv = 2, tokens = 5, block_size = 4, blocks = 6, max_pos = 64;
  const int64_t width = static_cast<int64_t>(hq + 2 * hkv) * head_dim;
  const Stored qkv = store(randn(tokens * width, 3), act);
  std::vector<float> table(static_cast<size_t>(max_pos) * rot_dim);
  for (int p = 0; p < max_pos; ++p) {
    for (int i = 0; i < rot_dim / 2; ++i) {
      const double a = p / std::pow(10000.0, 2.0 * i / rot_dim);
      table[p * rot_dim + i] = static_cast<float>(std::cos(a));
      table[p * rot_dim + rot_dim / 2 + i] = static_cast<float>(std::sin(a));
    }
  }
  const std::vector<int32_t> positions = {0, 7, 63, 64, 20};  // 64: outside the table
  const std::vector<int64_t> slots = {3, 9, -1, 17, 22};      // -1: padding
  DeviceTensor d_table = be.upload(table.data(), DType::F32, {max_pos, rot_dim});
  DeviceTensor d_pos = be.upload(positions.data(), DType::I32, {tokens});
  DeviceTensor d_slots = be.upload(slots.data(), DType::I64, {tokens});
  AttentionMetadata meta;
  meta.slot_mapping = d_slots.view;
  const std::vector<int64_t> cache_shape = {blocks, block_size, hkv, head_dim};
  std::vector<uint8_t> poison(static_cast<size_t>(blocks * block_size * hkv * head_dim) * dtype_size(cache), 0x5a);
  struct Result {
    std::vector<uint8_t> qkv, k_cache, v_cache;
  };
  auto run = [&](bool fused) {
    DeviceTensor buf = be.upload(qkv.bytes.data(), act, {tokens, width});
    DeviceTensor kc = be.upload(poison.data(), cache, cache_shape);
    DeviceTensor vc = be.upload(poison.data(), cache, cache_shape);
    Tensor q = column_slice(buf.view, 0, int64_t{hq} * head_dim);
    Tensor k = column_slice(buf.view, int64_t{hq} * head_dim, int64_t{hkv} * head_dim);
    Tensor v = column_slice(buf.view, int64_t{hq + hkv} * head_dim, int64_t{hkv} * head_dim);
    const KvCacheScales scales{0.5f, 2.0f};
    if (fused) {
      be.rotary_and_write_kv_cache(q, k, v, d_pos.view, d_table.view, head_dim, meta, kc.view, vc.view, scales);
    } else {
      be.Backend::rotary_and_write_kv_cache(q, k, v, d_pos.view, d_table.view, head_dim, meta, kc.view, vc.view,
                                            scales);
    }
    return Result{bytes_of(be, buf.view), bytes_of(be, kc.view), bytes_of(be, vc.view)};
  };
  const Result fused = run(true), separate = run(false);
  const std::string what = std::string(dtype_name(act)) + " activations, " + std::string(dtype_name(cache)) +
                           " cache, rot_dim " + std::to_string(rot_dim) + " of " + std::to_string(head_dim);
  EXPECT_EQ(fused.qkv, separate.qkv) << what << ": q/k/v";
  EXPECT_EQ(fused.k_cache, separate.k_cache) << what << ": K cache";
  EXPECT_EQ(fused.v_cache, separate.v_cache) << what << ": V cache";
  EXPECT_NE(fused.qkv, qkv.bytes) << what << ": nothing was rotated";
}

TEST(CudaRotaryCache, FusedEqualsRotaryThenCacheWrite) {
  CYPRIS_REQUIRE_GPU();
  for (DType act : {DType::F32, DType::BF16}) {
    for (DType cache : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2}) {
      check(act, cache, 128, 128);
      check(act, cache, 64, 32);  // partial rotary (Phi, StableLM-style)
    }
  }
  check(DType::F16, DType::F16, 256, 256);  // Gemma's head size, more pairs than threads
}

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
