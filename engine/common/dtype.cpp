#include "engine/common/dtype.h"

#include <cmath>
#include <optional>

#include "kernels/common/ggml_types.h"

namespace cypris {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::I64:
      return 8;
    case DType::U8:
    case DType::I8:
    case DType::F8E4M3:
    case DType::F8E5M2:
      return 1;
    default:
      return 0;  // block-quantized
  }
}

namespace {
// The ggml type behind each block-quantized DType.
std::optional<GgmlType> ggml_type_of(DType t) {
  switch (t) {
    case DType::Q4_0: return GgmlType::Q4_0;
    case DType::Q4_1: return GgmlType::Q4_1;
    case DType::Q5_0: return GgmlType::Q5_0;
    case DType::Q5_1: return GgmlType::Q5_1;
    case DType::Q8_0: return GgmlType::Q8_0;
    case DType::Q2_K: return GgmlType::Q2_K;
    case DType::Q3_K: return GgmlType::Q3_K;
    case DType::Q4_K: return GgmlType::Q4_K;
    case DType::Q5_K: return GgmlType::Q5_K;
    case DType::Q6_K: return GgmlType::Q6_K;
    case DType::IQ4_NL: return GgmlType::IQ4_NL;
    case DType::IQ4_XS: return GgmlType::IQ4_XS;
    default: return std::nullopt;
  }
}

// The repacked checkpoint types (kernels/common/wq_blocks.h): 4-byte header + values.
std::optional<DTypeBlock> wq_block(DType t) {
  switch (t) {
    case DType::W4G32: return DTypeBlock{32, 4 + 16};
    case DType::W4G64: return DTypeBlock{64, 4 + 32};
    case DType::W4G128: return DTypeBlock{128, 4 + 64};
    case DType::W8G32: return DTypeBlock{32, 4 + 32};
    case DType::W8G128: return DTypeBlock{128, 4 + 128};
    case DType::F8G128: return DTypeBlock{128, 4 + 128};  // fp32 scale + 128 e4m3 bytes
    case DType::NF4G64:
    case DType::FP4G64: return DTypeBlock{64, 4 + 32};  // fp32 absmax + 64 4-bit codes
    default: return std::nullopt;
  }
}
}  // namespace

bool dtype_is_quantized(DType t) { return ggml_type_of(t).has_value() || wq_block(t).has_value(); }

DTypeBlock dtype_block(DType t) {
  if (auto g = ggml_type_of(t)) {
    const auto& tr = ggml_traits(*g);
    return {tr.block_elems, tr.block_bytes};
  }
  if (auto b = wq_block(t)) return *b;
  return {1, static_cast<uint32_t>(dtype_size(t))};
}

size_t dtype_nbytes(DType t, int64_t numel) {
  const DTypeBlock b = dtype_block(t);
  return static_cast<size_t>(numel) / b.elems * b.bytes;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::I8: return "int8";
    case DType::F8E4M3: return "fp8_e4m3";
    case DType::F8E5M2: return "fp8_e5m2";
    case DType::W4G32: return "W4G32";
    case DType::W4G64: return "W4G64";
    case DType::W4G128: return "W4G128";
    case DType::W8G32: return "W8G32";
    case DType::W8G128: return "W8G128";
    case DType::F8G128: return "F8G128";
    case DType::NF4G64: return "NF4G64";
    case DType::FP4G64: return "FP4G64";
    default:
      if (auto g = ggml_type_of(t)) return ggml_traits(*g).name;
  }
  return "?";
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | (exp + 112) << 23 | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // overflow (after rounding) -> inf
  if (abs < 0x38800000u) {                       // subnormal or zero in f16
    if (abs < 0x33000000u) return sign;          // below half the smallest subnormal
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(abs >> 23);  // 14 + (113 - exp)
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

}  // namespace cypris
