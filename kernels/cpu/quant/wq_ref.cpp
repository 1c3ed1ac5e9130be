// Scalar decode of the repacked checkpoint types (wq_kernels.h); the dot products go through
// quant_ref.cpp's dot_ref like every other type.
#include <cstring>

#include "engine/common/error.h"
#include "kernels/common/wq_blocks.h"
#include "kernels/cpu/quant/wq_kernels.h"

namespace cypris::quant {
namespace {

template <int N>
void unpack_w4(const void* block, QuantUnpacked& u) {
  const auto* b = static_cast<const BlockW4<N>*>(block);
  for (int s = 0; s < N / 32; ++s) {
    const uint8_t* qs = b->qs + 16 * s;
    for (int j = 0; j < 16; ++j) {
      u.q[32 * s + j] = static_cast<int8_t>(qs[j] & 0xF);
      u.q[32 * s + 16 + j] = static_cast<int8_t>(qs[j] >> 4);
    }
  }
  u.d = u.dmin = f16_to_f32(b->d);
  for (int g = 0; g < N / 16; ++g) u.scale[g] = 1, u.min[g] = b->z;
}

template <int N>
void unpack_w8(const void* block, QuantUnpacked& u) {
  const auto* b = static_cast<const BlockW8<N>*>(block);
  std::memcpy(u.q, b->qs, N);
  u.d = u.dmin = f16_to_f32(b->d);
  for (int g = 0; g < N / 16; ++g) u.scale[g] = 1, u.min[g] = b->z;
}

}  // namespace

bool is_wq(DType t) {
  return wq_block_elems(t) != 0;
}

int wq_block_elems(DType t) {
  switch (t) {
    case DType::W4G32:
    case DType::W8G32:
      return 32;
    case DType::W4G64:
      return 64;
    case DType::W4G128:
    case DType::W8G128:
      return 128;
    default:
      return 0;
  }
}

void unpack_wq_block(DType t, const void* block, QuantUnpacked& u) {
  switch (t) {
    case DType::W4G32:
      return unpack_w4<32>(block, u);
    case DType::W4G64:
      return unpack_w4<64>(block, u);
    case DType::W4G128:
      return unpack_w4<128>(block, u);
    case DType::W8G32:
      return unpack_w8<32>(block, u);
    case DType::W8G128:
      return unpack_w8<128>(block, u);
    default:
      CYPRIS_FAIL("quantized kernels: {} is not a repacked checkpoint type", dtype_name(t));
  }
}

}  // namespace cypris::quant
