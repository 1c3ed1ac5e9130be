#include "kernels/cpu/kv_shift.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"

namespace cypris {

namespace {

float read_elem(const void* base, DType t, int64_t i, float scale) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(base)[i];
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::F8E4M3:
      return fp8_e4m3_to_f32(static_cast<const uint8_t*>(base)[i]) * scale;
    default:
      return fp8_e5m2_to_f32(static_cast<const uint8_t*>(base)[i]) * scale;
  }
}

void write_elem(void* base, DType t, int64_t i, float x, float scale) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(base)[i] = x;
      break;
    case DType::F16:
      static_cast<uint16_t*>(base)[i] = f32_to_f16(x);
      break;
    case DType::BF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16(x);
      break;
    case DType::F8E4M3:
      static_cast<uint8_t*>(base)[i] = f32_to_fp8_e4m3(x / scale);  // divides, as the cache write does
      break;
    default:
      static_cast<uint8_t*>(base)[i] = f32_to_fp8_e5m2(x / scale);
      break;
  }
}

}  // namespace

void move_kv_slots_cpu(void* k_cache, void* v_cache, int64_t num_slots, DType cache_dtype, int num_kv_heads,
                       int head_dim, int rot_dim, const int64_t* src_dst, int64_t num_moves, const float* cos_sin,
                       float k_scale) {
  CYPRIS_CHECK(cache_dtype == DType::F32 || cache_dtype == DType::F16 || cache_dtype == DType::BF16 ||
                   cache_dtype == DType::F8E4M3 || cache_dtype == DType::F8E5M2,
               "KV slot move: unsupported cache type {}", dtype_name(cache_dtype));
  if (cos_sin == nullptr) rot_dim = 0;
  CYPRIS_CHECK(num_kv_heads > 0 && head_dim > 0 && rot_dim >= 0 && rot_dim <= head_dim && rot_dim % 2 == 0,
               "KV slot move: rot_dim {} must be even and at most head_dim {}", rot_dim, head_dim);
  const bool fp8 = cache_dtype == DType::F8E4M3 || cache_dtype == DType::F8E5M2;
  CYPRIS_CHECK(!fp8 || (k_scale > 0.0f && std::isfinite(k_scale)), "KV slot move: k_scale {} must be positive",
               k_scale);
  for (int64_t i = 0; i < 2 * num_moves; ++i)
    CYPRIS_CHECK(src_dst[i] >= 0 && src_dst[i] < num_slots, "KV slot move: slot {} is outside the cache ({} slots)",
                 src_dst[i], num_slots);
  if (num_moves == 0) return;
  const int64_t width = int64_t(num_kv_heads) * head_dim;
  const size_t elem = dtype_size(cache_dtype);
  // Gather every source first (keys rotated, in fp32; values as bytes), then scatter.
  std::vector<float> keys(size_t(num_moves * width));
  std::vector<char> values(size_t(num_moves * width) * elem);
  const int half = rot_dim / 2;
  for (int64_t m = 0; m < num_moves; ++m) {
    const int64_t src = src_dst[2 * m];
    float* key = keys.data() + m * width;
    for (int64_t e = 0; e < width; ++e) key[e] = read_elem(k_cache, cache_dtype, src * width + e, k_scale);
    for (int h = 0; h < num_kv_heads && half > 0; ++h) {
      float* x = key + int64_t(h) * head_dim;
      const float* c = cos_sin + m * rot_dim;
      for (int j = 0; j < half; ++j) {
        const float x1 = x[j], x2 = x[j + half];
        x[j] = x1 * c[j] - x2 * c[half + j];
        x[j + half] = x2 * c[j] + x1 * c[half + j];
      }
    }
    std::memcpy(values.data() + size_t(m * width) * elem, static_cast<const char*>(v_cache) + size_t(src * width) * elem,
                size_t(width) * elem);
  }
  for (int64_t m = 0; m < num_moves; ++m) {
    const int64_t dst = src_dst[2 * m + 1];
    const float* key = keys.data() + m * width;
    for (int64_t e = 0; e < width; ++e) write_elem(k_cache, cache_dtype, dst * width + e, key[e], k_scale);
    std::memcpy(static_cast<char*>(v_cache) + size_t(dst * width) * elem, values.data() + size_t(m * width) * elem,
                size_t(width) * elem);
  }
}

}  // namespace cypris
