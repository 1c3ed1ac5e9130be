// Element types of tensors and their conversions. fp16/bf16 are stored as raw uint16_t bits;
// the conversions here are the scalar reference (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace cypris {

// The plain types, then llama.cpp's block-quantized weight types (GGUF), then the repacked
// integer types of quantized Hub checkpoints. A quantized tensor's shape
// is its logical [rows, row_length]; its bytes come in blocks along each row (kernels/common/ggml_types.h).
enum class DType : uint8_t {
  F32, F16, BF16, I32, I64, U8, I8, F8E4M3, F8E5M2,
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
  // Integer weights with a zero point, one fp16 scale per block of 32 or 128 values: what GPTQ and
  // AWQ checkpoints are repacked into at load (kernels/common/wq_blocks.h).
  W4G32, W4G128, W8G32, W8G128,
  // FP8 e4m3 weights with one fp32 scale per block of 128 values (per-tensor, per-channel and
  // 128x128 block scales all become one scale per block: kernels/common/fp8_blocks.h).
  F8G128,
  // bitsandbytes 4-bit weights: 64 codes of the NF4 or FP4 16-value table (two per byte) and one
  // fp32 absmax per block (nested absmax dequantized at load): kernels/common/bnb_blocks.h.
  NF4G64, FP4G64,
  // 4-bit integer weights with a zero point and one fp16 scale per block of 64 values (GPTQ, AWQ and
  // compressed-tensors groups of 64: kernels/common/wq_blocks.h). Last so the other values keep theirs.
  W4G64,
};

// Bytes of one element of a plain type; 0 for a block-quantized type (use dtype_nbytes).
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "float32", "float16", "bfloat16", ..., "Q4_K"
bool dtype_is_quantized(DType t);
// Elements and bytes of one block: {1, dtype_size} for a plain type, {32 or 256, bytes} for a quantized one.
struct DTypeBlock {
  uint32_t elems;
  uint32_t bytes;
};
DTypeBlock dtype_block(DType t);
// Bytes of `numel` elements (a whole number of blocks for a quantized type).
size_t dtype_nbytes(DType t, int64_t numel);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace cypris
