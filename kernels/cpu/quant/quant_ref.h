// The scalar reference of the quantized weight types: dequantization to fp32 (bit for bit what
// ggml's to_float gives), the 8-bit quantization of activations, and the integer dot product of a
// quantized weight row with quantized activations that the SIMD kernels must reproduce.
//
// Every supported type decodes through one common form (QuantUnpacked): per block, signed 8-bit
// values q, a small integer scale and min per group of 16, and two float factors, so that
//   w[i] = (d * scale[g]) * q[i] - dmin * min[g],   g = i / 16.
// Evaluated in exactly that order, this equals ggml's arithmetic for every type (see
// docs/quantization.md), and it turns the dot with 8-bit activations into integer sums.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris::quant {

struct QuantUnpacked {
  int8_t q[256];
  int16_t scale[16];
  int16_t min[16];
  float d;
  float dmin;
};

// Elements per weight block of a supported quantized type (32 or 256); 0 for any other dtype.
int block_elems(DType t);
// Bytes per weight block.
int block_bytes(DType t);
// True for the types these kernels handle (every DType for which dtype_is_quantized is true).
bool supported(DType t);

// Decodes one block (block_elems(t) values) into the common form.
void unpack_block(DType t, const void* block, QuantUnpacked& u);

// Dequantizes n elements (a whole number of blocks) starting at a block boundary.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// ---- 8-bit activations ----
// A row of k activations in blocks of `block` (32 for the 32-element weight types, 256 for the
// K-quants, matching the weight block so each block has one activation scale):
//   x[i] ~= d[i / block] * qs[i],  d = max|x| / 127 over the block, qs = round(x / d),
// with bsum[g] = sum of qs over the 16 values of group g (the weight mins need it).
struct ActRow {
  const int8_t* qs;
  const float* d;
  const int16_t* bsum;
};

// Activation block size that goes with a weight type.
int act_block(DType t);
// qs: [k], d: [k / block], bsum: [k / 16]. k must be a multiple of block.
void quantize_acts_ref(const float* x, int64_t k, int block, int8_t* qs, float* d, int16_t* bsum);

// Dot product of one weight row of k elements with one quantized activation row, computed per
// block as d_x * (d * sum_g scale[g] * sum_i q[i] * qs[i] - dmin * sum_g min[g] * bsum[g]) with
// integer inner sums, blocks added in order.
float dot_ref(DType t, const void* w_row, const ActRow& a, int64_t k);

}  // namespace cypris::quant
