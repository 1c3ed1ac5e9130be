// Linear layers and embedding lookups with block-quantized weights (GGUF types), weights kept
// quantized in memory.
//
// y = x · Wᵀ (+ bias): the activations are quantized to 8 bits per block (one fp32 scale per 32 or
// 256 values, as the weight type's block) and each output is an integer dot product per block
// (quant_dot.h), parallel over weight rows. Q8_0 weights take 16-bit activations instead
// (q8_0_acts16.h; prefill through a tiled VNNI GEMM, q8_0_tiled.h): 8-bit ones would double the
// error of an 8-bit format; FP8 weights (F8G128) take the fp32 activations as they are
// (fp8_gemm.h). The alternative path dequantizes tiles of weight rows to fp32 and uses the fp32
// GEMM: exact in the activations, used as a reference and selectable.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"
#include "kernels/common/gemm_group.h"
#include "kernels/cpu/quant/quant_dot.h"

namespace cypris {

class ThreadPool;

enum class QuantPath {
  Auto,           // 8-bit activations, best ISA
  Int8Scalar,     // 8-bit activations (16-bit for Q8_0), scalar reference kernels
  Int8Avx2,       // 8-bit activations (16-bit for Q8_0), AVX2 kernels
  Int8Avx512,     // 8-bit activations (16-bit for Q8_0), AVX-512 VNNI kernels
  DequantGemm,    // fp32 tiles of dequantized weights + fp32 GEMM
};

// x: [m, k] fp32 with row stride ldx; w: [n, k] in w_dtype (quantized, rows of whole blocks);
// bias: [n] or null; y: [m, n] fp32 with row stride ldy. Throws cypris::Error when the type is not
// a supported quantized type or k is not a whole number of blocks, or the path's ISA is missing.
void quant_gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
                    const float* bias, float* y, int64_t ldy, ThreadPool* pool, QuantPath path = QuantPath::Auto);

// For each group: y[first, first + rows) = x[first, first + rows) · wᵀ (no bias), every group's w
// [n, k] in w_dtype (kernels/common/gemm_group.h), best ISA. The rows are quantized once and all
// groups share one pass over the pool (a MoE layer's experts: one hand-off, not one per expert).
void quant_gemm_xwt_grouped(const float* x, int64_t k, int64_t ldx, const GemmGroup* groups, int64_t num_groups,
                            DType w_dtype, int64_t n, float* y, int64_t ldy, ThreadPool* pool);

// out[t, :] = dequantized table row ids[t]; ids already range-checked by the caller.
void quant_embedding(const int32_t* ids, int64_t num_tokens, const void* table, DType dtype, int64_t hidden,
                     float* out, ThreadPool* pool);

}  // namespace cypris
