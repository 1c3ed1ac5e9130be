#include "kernels/cpu/quant/exl2_layout.h"

#include <type_traits>

#include "engine/common/dtype.h"
#include "engine/common/error.h"
#include "kernels/common/wq_blocks.h"

namespace cypris::quant {

int Exl2Layer::value(int64_t packed_row, int64_t n) const {
  const Exl2Group& g = groups[static_cast<size_t>(group_of_row[static_cast<size_t>(packed_row)])];
  const int64_t bit = (packed_row - g.row0) * g.bits;
  const int64_t word = g.qrow0 + bit / 32;
  const int shift = static_cast<int>(bit % 32);
  uint64_t v = q_weight[word * out_padded + n] >> shift;
  // A value that straddles two words (3, 5, 6 bits) takes its high bits from the next row's word.
  if (shift + g.bits > 32) v |= static_cast<uint64_t>(q_weight[(word + 1) * out_padded + n]) << (32 - shift);
  return static_cast<int>(v & ((1u << g.bits) - 1));
}

float exl2_scale_max256(uint16_t q_scale_max_bits) {
  // Dividing by 256 is exact in fp32; the one rounding is to fp16 (subnormal for small maxima).
  return f16_to_f32(f32_to_f16(f16_to_f32(q_scale_max_bits) / 256.0f));
}

float exl2_scale(int code, float max256) {
  const float c = static_cast<float>((code + 1) * (code + 1));  // <= 256: exact in fp16
  return f16_to_f32(f32_to_f16(c * max256));                    // exact product, one rounding to fp16
}

void exl2_dequantize(const Exl2Layer& l, int64_t n0, int64_t n1, int64_t k0, int64_t k1, float* dst) {
  std::vector<float> scales(l.groups.size());
  for (int64_t n = n0; n < n1; ++n) {
    for (size_t g = 0; g < l.groups.size(); ++g) {
      scales[g] = exl2_scale(l.scale_code(static_cast<int64_t>(g), n), l.scale_max256[g]);
    }
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t kp = l.invperm[static_cast<size_t>(k)];
      const int g = l.group_of_row[static_cast<size_t>(kp)];
      const int zero = 1 << (l.groups[static_cast<size_t>(g)].bits - 1);
      *dst++ = static_cast<float>(l.value(kp, n) - zero) * scales[static_cast<size_t>(g)];
    }
  }
}

namespace {

template <int N, bool kW8>
void repack_exl2(const Exl2Layer& l, int64_t n0, int64_t n1, const int32_t* cols, int64_t ncols, void* dst) {
  using Block = std::conditional_t<kW8, BlockW8<N>, BlockW4<N>>;
  auto* out = static_cast<Block*>(dst);
  const int64_t per_row = ncols / N;
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t b = 0; b < per_row; ++b) {
      Block& blk = out[(n - n0) * per_row + b];
      const int32_t* c = cols + b * N;
      const int g = l.group_of_row[static_cast<size_t>(l.invperm[static_cast<size_t>(c[0])])];
      const int zero = 1 << (l.groups[static_cast<size_t>(g)].bits - 1);
      blk.d = f32_to_f16(exl2_scale(l.scale_code(g, n), l.scale_max256[static_cast<size_t>(g)]));  // exact
      if constexpr (kW8) {
        blk.z = static_cast<int16_t>(zero - 128);
        for (int i = 0; i < N; ++i)
          blk.qs[i] = static_cast<int8_t>(l.value(l.invperm[static_cast<size_t>(c[i])], n) - 128);
      } else {
        blk.z = static_cast<int16_t>(zero);
        for (int s = 0; s < N / 32; ++s) {
          for (int j = 0; j < 16; ++j) {
            const int lo = l.value(l.invperm[static_cast<size_t>(c[32 * s + j])], n);
            const int hi = l.value(l.invperm[static_cast<size_t>(c[32 * s + 16 + j])], n);
            blk.qs[16 * s + j] = static_cast<uint8_t>(lo | (hi << 4));
          }
        }
      }
    }
  }
}

}  // namespace

void exl2_repack_columns(const Exl2Layer& l, DType type, int64_t n0, int64_t n1, const int32_t* cols, int64_t ncols,
                         void* dst) {
  const bool w8 = type == DType::W8G32 || type == DType::W8G128;
  CYPRIS_CHECK(w8 || type == DType::W4G32 || type == DType::W4G128, "EXL2 layer: {} is not a W4/W8 block type",
               dtype_name(type));
  const int be = static_cast<int>(dtype_block(type).elems);
  CYPRIS_CHECK(ncols % be == 0 && n0 >= 0 && n1 <= l.out, "EXL2 layer: {} columns are not whole {} blocks", ncols,
               dtype_name(type));
  for (int64_t k = 0; k < ncols; ++k) {
    const int32_t c = cols[k];
    CYPRIS_CHECK(c >= 0 && c < l.in, "EXL2 layer: column {} outside its {} inputs", c, l.in);
    const int g = l.group_of_row[static_cast<size_t>(l.invperm[static_cast<size_t>(c)])];
    const int g0 = l.group_of_row[static_cast<size_t>(l.invperm[static_cast<size_t>(cols[k - k % be])])];
    const int bits = l.groups[static_cast<size_t>(g)].bits;
    CYPRIS_CHECK(g == g0 && (w8 ? bits > 4 : bits <= 4),
                 "EXL2 layer: input {} ({}-bit group {}) does not fit block {} of {} (group {})", c, bits, g, k / be,
                 dtype_name(type), g0);
  }
  switch (type) {
    case DType::W4G32:
      return repack_exl2<32, false>(l, n0, n1, cols, ncols, dst);
    case DType::W4G128:
      return repack_exl2<128, false>(l, n0, n1, cols, ncols, dst);
    case DType::W8G32:
      return repack_exl2<32, true>(l, n0, n1, cols, ncols, dst);
    default:
      return repack_exl2<128, true>(l, n0, n1, cols, ncols, dst);
  }
}

}  // namespace cypris::quant
