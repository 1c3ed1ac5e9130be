#include "kernels/cpu/quant/exl2_layout.h"

#include "engine/common/dtype.h"

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

}  // namespace cypris::quant
