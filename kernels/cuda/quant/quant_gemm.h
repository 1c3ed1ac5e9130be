// Launchers for block-quantized (GGUF) weights on the GPU: the fused dequantize-and-dot GEMV for
// decode (one weight, or a MoE layer's experts grouped in one launch), dequantization of weight rows
// to 16-bit tiles (the prefill path feeds those tiles to the GEMM of kernels/cuda/gemm.h) and the embedding lookup from a quantized table. CPU reference:
// kernels/cpu/quant/quant_ref.h (dequantize_row) — the values are the same bit for bit in fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"
#include "kernels/common/gemm_group.h"

namespace cypris {

// Rows of x the GEMV handles; larger batches take the dequantize-to-fp16 + GEMM path.
constexpr int64_t kQuantGemvMaxRows = 8;

// Activation and output types the GEMV takes: x fp32, fp16 or bf16; y fp32 or x's type.
bool quant_gemv_supported(DType x_dtype, DType y_dtype);
// Whether x's rows suit the GEMV's 16-byte loads: x 16-byte aligned, rows a multiple of 16 bytes apart.
bool quant_gemv_aligned(const void* x, DType x_dtype, int64_t ldx);

// y[m, n] = x[m, k] · Wᵀ (+ bias), W [n, k] quantized; m <= kQuantGemvMaxRows; x and y of
// quant_gemv_supported types (16-bit activations are read as they are: no conversion pass), x
// quant_gemv_aligned. fp32 products and sums; no 8-bit activation quantization on the GPU.
void quant_gemv_cuda(const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype,
                     int64_t n, const float* bias, void* y, DType y_dtype, int64_t ldy, cudaStream_t stream);

// Groups one grouped launch takes (kernel parameters, no upload); more go in several launches.
constexpr int kQuantGemvGroupsPerLaunch = 64;

// The grouped GEMV (a MoE projection at decode over quantized experts): for each group, y[first,
// first + rows) = x[first, first + rows) · w_gᵀ, every w_g [n, k] in w_dtype, 1 <= rows <=
// kQuantGemvMaxRows, no bias; x and y as quant_gemv_cuda. One launch per kQuantGemvGroupsPerLaunch groups.
void quant_gemv_grouped_cuda(const void* x, DType x_dtype, int64_t k, int64_t ldx, const GemmGroup* groups,
                             int64_t num_groups, DType w_dtype, int64_t n, void* y, DType y_dtype, int64_t ldy,
                             cudaStream_t stream);

// out[r, :] = dequantized row row0 + r for r < rows, rounded to out_dtype (F16 or BF16: the type of
// the activations the tile is multiplied with); out is [rows, k].
void quant_dequant_rows_cuda(const void* w, DType w_dtype, int64_t row0, int64_t rows, int64_t k, void* out,
                             DType out_dtype, cudaStream_t stream);

// out[t, :] = dequantized table row ids[t] in out_dtype (F32, F16 or BF16: the activations' type);
// an id outside [0, vocab) gives zeros, as embedding_cuda.
void quant_embedding_cuda(const int32_t* ids, int64_t num_tokens, const void* table, DType dtype, int64_t vocab,
                          int64_t hidden, void* out, DType out_dtype, cudaStream_t stream);

}  // namespace cypris
