// Load-time quantization of 16-bit weights (see online_quant.h).
#include "kernels/cpu/quant/online_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/common/fp8_blocks.h"
#include "kernels/common/wq_blocks.h"

namespace cypris::quant {
namespace {

float max_abs(const float* w, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[i]));
  return m;
}

// Round half to even of a float64 (the default rounding mode).
double rne(double v) {
  return std::nearbyint(v);
}

void fp8_row(const float* w, int64_t k, BlockF8* blocks) {
  float d = max_abs(w, k) / 448.0f;
  if (d == 0.0f) d = 1.0f;
  for (int64_t b = 0; b < k / kF8Block; ++b) {
    blocks[b].d = d;
    for (int i = 0; i < kF8Block; ++i) blocks[b].qs[i] = f32_to_fp8_e4m3(w[b * kF8Block + i] / d);
  }
}

template <int N>
void int8_row(const float* w, int64_t k, BlockW8<N>* blocks) {
  uint16_t dh = f32_to_f16(max_abs(w, k) / 127.0f);
  if (f16_to_f32(dh) == 0.0f) dh = f32_to_f16(1.0f);
  const double d = f16_to_f32(dh);
  for (int64_t b = 0; b < k / N; ++b) {
    blocks[b].d = dh;
    blocks[b].z = 0;  // zero point 128, stored minus 128
    for (int i = 0; i < N; ++i) {
      blocks[b].qs[i] = static_cast<int8_t>(std::clamp(rne(w[b * N + i] / d), -127.0, 127.0));
    }
  }
}

template <int N>
void int4_row(const float* w, int64_t k, BlockW4<N>* blocks) {
  for (int64_t b = 0; b < k / N; ++b) {
    const float* g = w + b * N;
    float lo = 0.0f, hi = 0.0f;
    for (int i = 0; i < N; ++i) lo = std::min(lo, g[i]), hi = std::max(hi, g[i]);
    const float range = hi - lo;
    uint16_t dh = f32_to_f16(range / 15.0f);
    if (f16_to_f32(dh) == 0.0f) dh = f32_to_f16(1.0f);
    const double d = f16_to_f32(dh);
    const double z = std::clamp(rne(-static_cast<double>(lo) / d), 0.0, 15.0);
    blocks[b].d = dh;
    blocks[b].z = static_cast<int16_t>(z);
    std::memset(blocks[b].qs, 0, sizeof(blocks[b].qs));
    for (int i = 0; i < N; ++i) {
      const int q = static_cast<int>(std::clamp(rne(g[i] / d) + z, 0.0, 15.0));
      // Q4_0's nibble order per 32 values: j < 16 low nibble of byte j, else high nibble of j - 16.
      const int s = i / 32, j = i % 32;
      blocks[b].qs[16 * s + (j % 16)] |= static_cast<uint8_t>(j < 16 ? q : q << 4);
    }
  }
}

}  // namespace

std::optional<DType> online_quant_type(OnlineQuant mode, int64_t k) {
  switch (mode) {
    case OnlineQuant::Fp8:
      return k % kF8Block == 0 ? std::optional<DType>(DType::F8G128) : std::nullopt;
    case OnlineQuant::Int8:
      return k % 128 == 0  ? std::optional<DType>(DType::W8G128)
             : k % 32 == 0 ? std::optional<DType>(DType::W8G32)
                           : std::nullopt;
    case OnlineQuant::Int4:
      return k % 128 == 0  ? std::optional<DType>(DType::W4G128)
             : k % 32 == 0 ? std::optional<DType>(DType::W4G32)
                           : std::nullopt;
  }
  return std::nullopt;
}

void online_quantize_rows(OnlineQuant mode, DType type, const float* w, int64_t rows, int64_t k, void* dst) {
  CYPRIS_CHECK(online_quant_type(mode, k) == type, "online quantization: rows of {} values cannot be quantized to {}",
               k, dtype_name(type));
  const size_t row_bytes = dtype_nbytes(type, k);
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = w + r * k;
    void* out = static_cast<char*>(dst) + r * row_bytes;
    switch (type) {
      case DType::F8G128:
        fp8_row(wr, k, static_cast<BlockF8*>(out));
        break;
      case DType::W8G128:
        int8_row<128>(wr, k, static_cast<BlockW8<128>*>(out));
        break;
      case DType::W8G32:
        int8_row<32>(wr, k, static_cast<BlockW8<32>*>(out));
        break;
      case DType::W4G128:
        int4_row<128>(wr, k, static_cast<BlockW4<128>*>(out));
        break;
      case DType::W4G32:
        int4_row<32>(wr, k, static_cast<BlockW4<32>*>(out));
        break;
      default:
        CYPRIS_FAIL("online quantization: {} is not an online quantization type", dtype_name(type));
    }
  }
}

}  // namespace cypris::quant
