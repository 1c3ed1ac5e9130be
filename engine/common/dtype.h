// Element types of tensors and their conversions. fp16/bf16 are stored as raw uint16_t bits;
// the conversions here are the scalar reference (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace cypris {

enum class DType : uint8_t { F32, F16, BF16, I32, I64, U8, I8, F8E4M3, F8E5M2 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "float32", "float16", "bfloat16", ...

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
