// Quantizing 16-bit weights at load time (-q fp8, --load-in-8bit, --load-in-4bit) into the block
// types the kernels read. Each is round to nearest, with a scale from the largest magnitude, and
// every step is defined so that a float64 reference (tests/tools/gen_quant_fixtures.py) gets the
// same bytes:
//  F8G128  per output row: d = fp32(max|w| / 448), q = e4m3(fp32(w / d)), round to nearest even,
//          saturating at 448 (kernels/common/fp8.h). Blocks repeat the row's d.
//  W8G*    per output row, symmetric int8: d = fp16(fp32(max|w| / 127)), q = clamp(rne(w / d),
//          -127, 127) with w / d in float64; zero point 128 (stored 0), q stored as q.
//  W4G*    per group of 128 (W4G128) or 32 (W4G32) input columns, asymmetric uint4 (GPTQ's
//          round-to-nearest start): lo = min(w, 0), hi = max(w, 0), d = fp16(fp32(fp32(hi - lo) / 15)),
//          z = clamp(rne(-lo / d), 0, 15), q = clamp(rne(w / d) + z, 0, 15).
// A scale that comes out 0 (an all-zero row or group) is 1. Not bitsandbytes' NF4 / LLM.int8()
// formats: the same bit widths in the layouts Cypris's kernels read.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/common/dtype.h"

namespace cypris::quant {

enum class OnlineQuant { Fp8, Int8, Int4 };

// The block type a [rows, k] weight is quantized into, or nullopt when k does not fit one (the
// layer then stays 16-bit): F8G128 needs k % 128 == 0; W8/W4 take 128-value blocks when k % 128 ==
// 0, else 32-value blocks when k % 32 == 0.
std::optional<DType> online_quant_type(OnlineQuant mode, int64_t k);

// rows x k fp32 weights (row stride k) -> rows of `type` blocks (online_quant_type's) at dst.
void online_quantize_rows(OnlineQuant mode, DType type, const float* w, int64_t rows, int64_t k, void* dst);

}  // namespace cypris::quant
