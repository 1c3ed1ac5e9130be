// Scalar reference of the quantized types: see quant_ref.h. Plain loops, written for clarity; the
// SIMD kernels in quant_dot_*.cpp are checked against these.
#include "kernels/cpu/quant/quant_ref.h"

#include <cmath>
#include <cstring>

#include "engine/common/error.h"
#include "kernels/common/fp8_blocks.h"
#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/quant/bnb_gemm.h"
#include "kernels/cpu/quant/fp8_gemm.h"
#include "kernels/cpu/quant/wq_kernels.h"

namespace cypris::quant {
namespace {

inline float h2f(uint16_t h) { return f16_to_f32(h); }

// The 2-bit field of element e (0..255) in the Q2_K/Q3_K qs layout.
inline int q2_bits(const uint8_t* qs, int e) {
  const int h = e / 128, p = (e % 128) / 32, l = e % 32;
  return (qs[32 * h + l] >> (2 * p)) & 3;
}

// Q4_0/Q4_1/IQ4_NL nibble layout: element j < 16 in the low nibble of qs[j], j >= 16 in the high
// nibble of qs[j - 16].
inline int nib32(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

void set_uniform(QuantUnpacked& u, int groups, int16_t scale, int16_t min) {
  for (int g = 0; g < groups; ++g) {
    u.scale[g] = scale;
    u.min[g] = min;
  }
}

}  // namespace

int block_elems(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0: case DType::IQ4_NL:
      return kQK;
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::IQ4_XS:
      return kQKK;
    case DType::F8G128:
      return kF8Block;  // FP8: dequantize_row only; its products are fp8_gemm.h's
    case DType::NF4G64:
    case DType::FP4G64:
      return 64;  // bitsandbytes 4-bit: dequantize_row only; its products are bnb_gemm.h's
    default:
      return wq_block_elems(t);  // the repacked checkpoint types (wq_kernels.h), else 0
  }
}

int block_bytes(DType t) { return supported(t) ? static_cast<int>(dtype_block(t).bytes) : 0; }

bool supported(DType t) { return block_elems(t) != 0; }

int act_block(DType t) { return block_elems(t); }

void unpack_block(DType t, const void* block, QuantUnpacked& u) {
  switch (t) {
    case DType::Q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(block);
      for (int j = 0; j < 32; ++j) u.q[j] = static_cast<int8_t>(nib32(b->qs, j) - 8);
      u.d = h2f(b->d), u.dmin = 0.0f;
      set_uniform(u, 2, 1, 0);
      return;
    }
    case DType::Q4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(block);
      for (int j = 0; j < 32; ++j) u.q[j] = static_cast<int8_t>(nib32(b->qs, j));
      // w = d*q + m  ==  (d*1)*q - (-m)*1 exactly.
      u.d = h2f(b->d), u.dmin = -h2f(b->m);
      set_uniform(u, 2, 1, 1);
      return;
    }
    case DType::Q5_0: {
      const auto* b = static_cast<const BlockQ5_0*>(block);
      uint32_t qh;
      std::memcpy(&qh, b->qh, 4);
      for (int j = 0; j < 32; ++j) u.q[j] = static_cast<int8_t>((nib32(b->qs, j) | (((qh >> j) & 1) << 4)) - 16);
      u.d = h2f(b->d), u.dmin = 0.0f;
      set_uniform(u, 2, 1, 0);
      return;
    }
    case DType::Q5_1: {
      const auto* b = static_cast<const BlockQ5_1*>(block);
      uint32_t qh;
      std::memcpy(&qh, b->qh, 4);
      for (int j = 0; j < 32; ++j) u.q[j] = static_cast<int8_t>(nib32(b->qs, j) | (((qh >> j) & 1) << 4));
      u.d = h2f(b->d), u.dmin = -h2f(b->m);
      set_uniform(u, 2, 1, 1);
      return;
    }
    case DType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(block);
      std::memcpy(u.q, b->qs, 32);
      u.d = h2f(b->d), u.dmin = 0.0f;
      set_uniform(u, 2, 1, 0);
      return;
    }
    case DType::IQ4_NL: {
      const auto* b = static_cast<const BlockIQ4_NL*>(block);
      for (int j = 0; j < 32; ++j) u.q[j] = kIq4Values[nib32(b->qs, j)];
      u.d = h2f(b->d), u.dmin = 0.0f;
      set_uniform(u, 2, 1, 0);
      return;
    }
    case DType::Q2_K: {
      const auto* b = static_cast<const BlockQ2_K*>(block);
      for (int e = 0; e < 256; ++e) u.q[e] = static_cast<int8_t>(q2_bits(b->qs, e));
      for (int g = 0; g < 16; ++g) {
        u.scale[g] = b->scales[g] & 0xF;
        u.min[g] = b->scales[g] >> 4;
      }
      u.d = h2f(b->d), u.dmin = h2f(b->dmin);
      return;
    }
    case DType::Q3_K: {
      const auto* b = static_cast<const BlockQ3_K*>(block);
      for (int e = 0; e < 256; ++e) {
        const int hbit = (b->hmask[e % 32] >> (e / 32)) & 1;
        u.q[e] = static_cast<int8_t>(q2_bits(b->qs, e) - (hbit ? 0 : 4));
      }
      int8_t sc[16];
      k3_scales(b->scales, sc);
      for (int g = 0; g < 16; ++g) u.scale[g] = sc[g], u.min[g] = 0;
      u.d = h2f(b->d), u.dmin = 0.0f;
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool five = t == DType::Q5_K;
      const auto* b4 = static_cast<const BlockQ4_K*>(block);
      const auto* b5 = static_cast<const BlockQ5_K*>(block);
      const uint8_t* scales = five ? b5->scales : b4->scales;
      const uint8_t* qs = five ? b5->qs : b4->qs;
      for (int e = 0; e < 256; ++e) {
        const int c = e / 64, l = e % 32;
        int v = (e % 64) < 32 ? qs[32 * c + l] & 0xF : qs[32 * c + l] >> 4;
        if (five) v |= ((b5->qh[l] >> (e / 32)) & 1) << 4;
        u.q[e] = static_cast<int8_t>(v);
      }
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        k4_scale_min(j, scales, &sc, &m);
        u.scale[2 * j] = u.scale[2 * j + 1] = sc;
        u.min[2 * j] = u.min[2 * j + 1] = m;
      }
      u.d = h2f(five ? b5->d : b4->d), u.dmin = h2f(five ? b5->dmin : b4->dmin);
      return;
    }
    case DType::Q6_K: {
      const auto* b = static_cast<const BlockQ6_K*>(block);
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, p = (e % 128) / 32, l = e % 32;
        const uint8_t lo = b->ql[64 * h + 32 * (p & 1) + l];
        const int low4 = p < 2 ? lo & 0xF : lo >> 4;
        const int high2 = (b->qh[32 * h + l] >> (2 * p)) & 3;
        u.q[e] = static_cast<int8_t>((low4 | (high2 << 4)) - 32);
      }
      for (int g = 0; g < 16; ++g) u.scale[g] = b->scales[g], u.min[g] = 0;
      u.d = h2f(b->d), u.dmin = 0.0f;
      return;
    }
    case DType::IQ4_XS: {
      const auto* b = static_cast<const BlockIQ4_XS*>(block);
      for (int e = 0; e < 256; ++e) {
        const uint8_t* qs = b->qs + 16 * (e / 32);
        u.q[e] = kIq4Values[nib32(qs, e % 32)];
      }
      for (int j = 0; j < 8; ++j) {
        const int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4);
        u.scale[2 * j] = u.scale[2 * j + 1] = static_cast<int16_t>(ls - 32);
        u.min[2 * j] = u.min[2 * j + 1] = 0;
      }
      u.d = h2f(b->d), u.dmin = 0.0f;
      return;
    }
    default:
      CYPRIS_CHECK(is_wq(t), "quantized kernels: {} is not a supported quantized type", dtype_name(t));
      unpack_wq_block(t, block, u);
      return;
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  if (t == DType::F8G128) return dequantize_f8_row(src, dst, n);  // not in the integer common form
  if (is_b4(t)) return dequantize_b4_row(t, src, dst, n);           // table values, not integers
  const int be = block_elems(t), bb = block_bytes(t);
  CYPRIS_CHECK(be > 0 && n % be == 0, "dequantize: {} elements of {} are not a whole number of blocks", n,
               dtype_name(t));
  QuantUnpacked u;
  for (int64_t b = 0; b < n / be; ++b) {
    unpack_block(t, static_cast<const uint8_t*>(src) + b * bb, u);
    float* y = dst + b * be;
    for (int i = 0; i < be; ++i) {
      const int g = i / 16;
      // The order of operations is ggml's: the float group scale first, then times q, then the
      // min subtracted. Kept apart so the compiler cannot fuse them into an fma.
      const float dl = u.d * static_cast<float>(u.scale[g]);
      const float ml = u.dmin * static_cast<float>(u.min[g]);
      const volatile float prod = dl * static_cast<float>(u.q[i]);
      y[i] = prod - ml;
    }
  }
}

void quantize_acts_ref(const float* x, int64_t k, int block, int8_t* qs, float* d, int16_t* bsum) {
  for (int64_t b = 0; b < k / block; ++b) {
    const float* xb = x + b * block;
    float amax = 0.0f;
    for (int i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    for (int i = 0; i < block; ++i) {
      // nearbyint: round half to even, as the SIMD conversions do.
      const float v = std::nearbyint(xb[i] * id);
      qs[b * block + i] = static_cast<int8_t>(std::fmax(-127.0f, std::fmin(127.0f, v)));
    }
  }
  for (int64_t g = 0; g < k / 16; ++g) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += qs[g * 16 + i];
    bsum[g] = static_cast<int16_t>(s);
  }
}

float dot_ref(DType t, const void* w_row, const ActRow& a, int64_t k) {
  const int be = block_elems(t), bb = block_bytes(t);
  QuantUnpacked u;
  float sum = 0.0f;
  for (int64_t b = 0; b < k / be; ++b) {
    unpack_block(t, static_cast<const uint8_t*>(w_row) + b * bb, u);
    const int8_t* xq = a.qs + b * be;
    const int16_t* bs = a.bsum + b * (be / 16);
    int32_t isum = 0, msum = 0;
    for (int g = 0; g < be / 16; ++g) {
      int32_t gs = 0;
      for (int i = 0; i < 16; ++i) gs += u.q[g * 16 + i] * xq[g * 16 + i];
      isum += u.scale[g] * gs;
      msum += u.min[g] * bs[g];
    }
    sum += a.d[b] * (u.d * static_cast<float>(isum) - u.dmin * static_cast<float>(msum));
  }
  return sum;
}

}  // namespace cypris::quant
