// The block layouts that integer-quantized checkpoints from the Hub (GPTQ, AWQ) are repacked into
// at load time, so that the CPU and CUDA kernels read a row of blocks as they read GGUF's: one fp16
// scale and one integer zero point per block of 32, 64 or 128 values,
//   w = d * (q - z),
// with d the checkpoint's group scale (exact: it is fp16 there too) and z its group zero point. A
// checkpoint group of 32 values becomes 32-value blocks, a group of 64 64-value blocks (4-bit; 8-bit
// ones take 32-value blocks), a group of 128 (or a whole row, group_size -1) 128-value blocks, so the
// scales are not repeated more than a block per group.
// In the common form of the quantized kernels (kernels/cpu/quant/quant_ref.h) a block is
//   u.d = d, u.dmin = d, scale[g] = 1, min[g] = z:  w = (d * 1) * q - d * z,
// both products exact in fp32 (11-bit d times an integer below 2^9), and so is their difference,
// which is d * (q - z) exactly: dequantization is exact.
//
// 4-bit: each 32 values of a block (W4G64: two runs, W4G128: four) in the Q4_0 nibble order (value j < 16 in the low nibble of
// byte j, value j >= 16 in the high nibble of byte j - 16), 16 bytes per 32 values, q in [0, 15].
// 8-bit: q - 128 as int8 (so that q fits the common form's int8), and z - 128 stored likewise.
#pragma once

#include <cstdint>

namespace cypris::quant {

#pragma pack(push, 1)
template <int N>
struct BlockW4 {
  uint16_t d;  // fp16 scale
  int16_t z;   // zero point (v1 GPTQ checkpoints: the stored zero + 1, so up to 16)
  uint8_t qs[N / 2];
};
template <int N>
struct BlockW8 {
  uint16_t d;    // fp16 scale
  int16_t z;     // zero point - 128
  int8_t qs[N];  // q - 128
};
#pragma pack(pop)

static_assert(sizeof(BlockW4<32>) == 20 && sizeof(BlockW4<64>) == 36 && sizeof(BlockW4<128>) == 68);
static_assert(sizeof(BlockW8<32>) == 36 && sizeof(BlockW8<128>) == 132);

}  // namespace cypris::quant
