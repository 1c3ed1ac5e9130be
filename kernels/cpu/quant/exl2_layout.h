// EXL2 layers (exllamav2's format): how a layer's values, scales and input permutation are laid out
// in the checkpoint, and their exact dequantization. The loader (engine/loader/exl2_weights.cpp)
// checks the tensors against each other and fills an Exl2Layer; this file only reads it.
//
// A layer of `out` outputs and `in` inputs was quantized in a permuted input order: packed row k'
// holds input row perm[k'] (act-order), and q_invperm[k] is the packed row of input k. The packed
// rows are cut into groups, each with its own bit width (2, 3, 4, 5, 6 or 8) and one 4-bit scale
// code per (group, output):
//   q_weight [qrows, out_p] uint32 (out_p: out rounded up to 32): for each group and output n, the
//            group's values as one little-endian bit stream down the column, starting at the
//            group's first q_weight row; the value of the group's row r is at bit r * bits (a 3-, 5-
//            or 6-bit value may straddle two words). q in [0, 2^bits - 1], zero point 2^(bits - 1).
//   q_scale  [groups, out_p / 8] uint32: code c of output n at bit 4 * (n % 8) of word n / 8.
//   q_scale_max [groups] fp16.
// Dequantization as exllamav2's kernels compute it (dq_scale, with q_scale_max premultiplied by 1/256
// in fp16 when the layer is loaded):
//   s = fp16(fp16((c + 1)^2) * fp16(q_scale_max / 256)),   w[n, k] = (q[k', n] - 2^(bits - 1)) * s,
// with k' = q_invperm[k]. s is an fp16 value and |q - z| < 2^8, so w is exact in fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/common/dtype.h"

namespace cypris::quant {

struct Exl2Group {
  int bits = 0;
  int64_t row0 = 0;   // first packed row
  int64_t rows = 0;   // packed rows in the group
  int64_t qrow0 = 0;  // first q_weight row of its values
};

struct Exl2Layer {
  int64_t in = 0, out = 0, out_padded = 0;
  const uint32_t* q_weight = nullptr;  // [qrows, out_padded]
  const uint32_t* q_scale = nullptr;   // [groups, out_padded / 8]
  std::vector<Exl2Group> groups;
  std::vector<float> scale_max256;    // per group: fp16(q_scale_max / 256), as fp32
  std::vector<int32_t> invperm;       // [in]: the packed row of input k
  std::vector<int32_t> group_of_row;  // [in]: the group of packed row k'

  // The unsigned value of packed row k', output n (0 .. 2^bits - 1).
  int value(int64_t packed_row, int64_t n) const;
  // The 4-bit scale code of group g, output n.
  int scale_code(int64_t g, int64_t n) const { return (q_scale[g * (out_padded / 8) + n / 8] >> (4 * (n % 8))) & 15; }
};

// fp16(q_scale_max / 256) as fp32, from the stored fp16 bits (round to nearest even, as fp16 division).
float exl2_scale_max256(uint16_t q_scale_max_bits);
// The group scale s = fp16((code + 1)^2 * max256), as fp32.
float exl2_scale(int code, float max256);

// Rows [n0, n1) (outputs), columns [k0, k1) (inputs, in the model's order) of the layer, dequantized
// to fp32 row-major: (q - 2^(bits - 1)) * s, exactly.
void exl2_dequantize(const Exl2Layer& l, int64_t n0, int64_t n1, int64_t k0, int64_t k1, float* dst);

// Kept at its bits: rows [n0, n1) with the layer's inputs (model order) cols[0 .. ncols) in that
// order as blocks of `type` (W4G32/W4G128 for 2-, 3- and 4-bit groups, W8G32/W8G128 for 5, 6 and
// 8 bits): d = s (an fp16 value), z = 2^(bits - 1), q as stored, so d * (q - z) is the value above
// exactly. Every block's inputs lie in one group whose width fits the type (checked).
void exl2_repack_columns(const Exl2Layer& l, DType type, int64_t n0, int64_t n1, const int32_t* cols, int64_t ncols,
                         void* dst);

}  // namespace cypris::quant
