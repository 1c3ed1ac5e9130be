// The block layout bitsandbytes 4-bit weights are kept in (DType::NF4G64, DType::FP4G64): 64 codes
// of a 16-value table and the block's fp32 absmax, so that
//   w = table[q] * d        (one fp32 multiply, never fused)
// exactly as bitsandbytes dequantizes (its kernels multiply the table value by the absmax in fp32).
// A checkpoint's nested (double-quantized) absmax is dequantized at load to the fp32 value
// bitsandbytes computes (nested_quant_map[code] * nested_absmax + nested_offset), so every block
// holds the checkpoint's values bit for bit.
//
// Nibble order: element j < 32 in the low nibble of qs[j], j >= 32 in the high nibble of qs[j - 32]
// (Q4_0's order, stretched to 64). bitsandbytes packs element 2i in the high nibble of byte i and
// 2i + 1 in the low one; the loader reorders (engine/loader/bnb_weights.cpp), so that the SIMD
// kernels widen 8 or 16 consecutive bytes into the codes of consecutive elements.
// 36 bytes per 64 weights: the checkpoint's 4.5 bits per weight with fp32 absmax, 1.09x its 4.13 bits
// with nested absmax.
#pragma once

#include <cstdint>

namespace cypris::quant {

constexpr int kB4Block = 64;

#pragma pack(push, 1)
struct BlockB4 {
  float d;                    // absmax
  uint8_t qs[kB4Block / 2];  // codes, Q4_0 order (above)
};
#pragma pack(pop)

static_assert(sizeof(BlockB4) == 36);

// The code of element j of a block.
inline constexpr int b4_code(const uint8_t* qs, int j) { return j < 32 ? qs[j] & 0xF : qs[j - 32] >> 4; }

// bitsandbytes' NF4 table (get_4bit_type("nf4"), the quant_map its checkpoints store): the Python
// floats rounded to fp32, as torch.tensor makes them.
#define CYPRIS_BNB_NF4_TABLE                                                                                      \
  {                                                                                                               \
    -1.0f, static_cast<float>(-0.6961928009986877), static_cast<float>(-0.5250730514526367),                      \
        static_cast<float>(-0.39491748809814453), static_cast<float>(-0.28444138169288635),                       \
        static_cast<float>(-0.18477343022823334), static_cast<float>(-0.09105003625154495), 0.0f,                 \
        static_cast<float>(0.07958029955625534), static_cast<float>(0.16093020141124725),                         \
        static_cast<float>(0.24611230194568634), static_cast<float>(0.33791524171829224),                         \
        static_cast<float>(0.44070982933044434), static_cast<float>(0.5626170039176941),                          \
        static_cast<float>(0.7229568362236023), 1.0f                                                              \
  }
// bitsandbytes' FP4 table (get_4bit_type("fp4")): {0, 0.0625, 8, 12, 4, 6, 2, 3} and their negatives
// (code | 8), divided by 12 in fp32. Code 8 (-0 in bitsandbytes' list) is +0 in its quant_map.
#define CYPRIS_BNB_FP4_TABLE                                                                                  \
  {                                                                                                           \
    0.0f, 0.0625f / 12.0f, 8.0f / 12.0f, 12.0f / 12.0f, 4.0f / 12.0f, 6.0f / 12.0f, 2.0f / 12.0f, 3.0f / 12.0f, \
        0.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -12.0f / 12.0f, -4.0f / 12.0f, -6.0f / 12.0f, -2.0f / 12.0f,   \
        -3.0f / 12.0f                                                                                         \
  }

inline constexpr float kNf4Table[16] = CYPRIS_BNB_NF4_TABLE;
inline constexpr float kFp4Table[16] = CYPRIS_BNB_FP4_TABLE;

}  // namespace cypris::quant
