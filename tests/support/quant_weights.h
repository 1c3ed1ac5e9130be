// Random block-quantized weights for kernel tests (CPU and GPU): random bytes with every fp16 scale
// field set to a small random normal number, so each block is a valid block of its type.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/common/dtype.h"
#include "kernels/common/quant_blocks.h"
#include "kernels/common/wq_blocks.h"

namespace cypris::test {

// n rows of k random weights: random bytes, then every fp16 scale field set to a small random
// normal number (random bits could be Inf/NaN, which no quantizer writes).
inline std::vector<uint8_t> random_weights(DType t, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 g(seed);
  const size_t bytes = dtype_nbytes(t, n * k);
  std::vector<uint8_t> w(bytes);
  for (auto& b : w) b = static_cast<uint8_t>(g());
  std::uniform_real_distribution<float> u(0.002f, 0.05f);
  auto h = [&] { return f32_to_f16((g() & 1 ? -1.0f : 1.0f) * u(g)); };
  const size_t bb = dtype_block(t).bytes;
  for (size_t off = 0; off < bytes; off += bb) {
    uint8_t* p = w.data() + off;
    auto set = [&](uint16_t* f) { *f = h(); };
    switch (t) {
      case DType::Q4_0: set(&reinterpret_cast<quant::BlockQ4_0*>(p)->d); break;
      case DType::Q4_1: set(&reinterpret_cast<quant::BlockQ4_1*>(p)->d), set(&reinterpret_cast<quant::BlockQ4_1*>(p)->m); break;
      case DType::Q5_0: set(&reinterpret_cast<quant::BlockQ5_0*>(p)->d); break;
      case DType::Q5_1: set(&reinterpret_cast<quant::BlockQ5_1*>(p)->d), set(&reinterpret_cast<quant::BlockQ5_1*>(p)->m); break;
      case DType::Q8_0: set(&reinterpret_cast<quant::BlockQ8_0*>(p)->d); break;
      case DType::Q2_K: set(&reinterpret_cast<quant::BlockQ2_K*>(p)->d), set(&reinterpret_cast<quant::BlockQ2_K*>(p)->dmin); break;
      case DType::Q3_K: set(&reinterpret_cast<quant::BlockQ3_K*>(p)->d); break;
      case DType::Q4_K: set(&reinterpret_cast<quant::BlockQ4_K*>(p)->d), set(&reinterpret_cast<quant::BlockQ4_K*>(p)->dmin); break;
      case DType::Q5_K: set(&reinterpret_cast<quant::BlockQ5_K*>(p)->d), set(&reinterpret_cast<quant::BlockQ5_K*>(p)->dmin); break;
      case DType::Q6_K: set(&reinterpret_cast<quant::BlockQ6_K*>(p)->d); break;
      case DType::IQ4_NL: set(&reinterpret_cast<quant::BlockIQ4_NL*>(p)->d); break;
      case DType::IQ4_XS: set(&reinterpret_cast<quant::BlockIQ4_XS*>(p)->d); break;
      // GPTQ/AWQ repacked blocks: a zero point in the range of their bits (4-bit v1: 0..16; 8-bit: -128..128).
      case DType::W4G32: case DType::W4G64: case DType::W4G128: set(reinterpret_cast<uint16_t*>(p)), reinterpret_cast<int16_t*>(p)[1] = static_cast<int16_t>(g() % 17); break;
      case DType::W8G32: case DType::W8G128: set(reinterpret_cast<uint16_t*>(p)), reinterpret_cast<int16_t*>(p)[1] = static_cast<int16_t>(static_cast<int>(g() % 257) - 128); break;
      // FP8 blocks: an fp32 scale (2^-12..2^-4 in magnitude), and no NaN codes (0x7f, 0xff).
      case DType::F8G128: {
        const float d = std::ldexp(1.0f + static_cast<float>(g() % 1024) / 1024.0f, -4 - static_cast<int>(g() % 9));
        std::memcpy(p, &d, 4);
        for (int i = 4; i < 132; ++i)
          if ((p[i] & 0x7f) == 0x7f) p[i] = static_cast<uint8_t>(p[i] & 0xf0);
        break;
      }
      // bitsandbytes 4-bit blocks: an fp32 absmax (2^-8..2^0); every code is valid.
      case DType::NF4G64: case DType::FP4G64: {
        const float d = std::ldexp(1.0f + static_cast<float>(g() % 1024) / 1024.0f, -8 + static_cast<int>(g() % 9));
        std::memcpy(p, &d, 4);
        break;
      }
      default: break;
    }
  }
  return w;
}

}  // namespace cypris::test
