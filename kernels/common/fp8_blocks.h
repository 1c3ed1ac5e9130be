// The block layout FP8 weights are kept in (DType::F8G128): 128 e4m3 values (kernels/common/fp8.h)
// and one fp32 scale, so that
//   w = fp8_e4m3_to_f32(q) * d        (one fp32 multiply, never fused)
// Every FP8 checkpoint scale fits this one form: a per-tensor scale is repeated in each block, a
// per-channel (per output row) one in each block of its row, a 128x128 block scale
// (weight_scale_inv, DeepSeek-V3 / Qwen3-FP8) in the block of its row that lies in its 128 columns.
// The checkpoint's fp32 scales are kept exactly (bf16 / fp16 scales convert to fp32 exactly), so the
// values equal the reference dequantization q * scale in fp32 bit for bit. 132 bytes per 128 weights:
// 1.03x the checkpoint's fp8 bytes.
#pragma once

#include <cstdint>

namespace cypris::quant {

constexpr int kF8Block = 128;

#pragma pack(push, 1)
struct BlockF8 {
  float d;               // scale
  uint8_t qs[kF8Block];  // e4m3 codes; never the NaN codes (0x7f, 0xff): checked at load
};
#pragma pack(pop)

static_assert(sizeof(BlockF8) == 132);

}  // namespace cypris::quant
