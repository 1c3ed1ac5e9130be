// Launchers for the linear layers on the GPU: y = x · Wᵀ (+ bias) with fp32 activations and
// F32/F16/BF16 weights. Few rows (decode) go to a memory-bound GEMV kernel that streams the
// weights once; more rows go to cuBLAS (tensor cores for 16-bit weights, fp32 accumulation).
// CPU reference: gemm_xwt in kernels/cpu/gemm.h.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// Up to this many rows the GEMV kernel is used.
inline constexpr int64_t kGemvMaxRows = 8;

// The GEMV kernel alone (m <= kGemvMaxRows): x [m, k] fp32 with row stride ldx; w [n, k] row-major
// in w_dtype; bias [n] fp32 or null; y [m, n] fp32 with row stride ldy. fp32 accumulation.
void gemv_xwt_cuda(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
                   const float* bias, float* y, int64_t ldy, cudaStream_t stream);

enum class GemmPrecision {
  // 16-bit weights: activations are rounded to the weight dtype and multiplied on tensor cores
  // with fp32 accumulation (vLLM's numerics).
  Fast,
  // 16-bit weights are widened to fp32 in bounded tiles and multiplied in fp32 (matches the CPU
  // backend's numerics; for equivalence tests, slower and uses more scratch).
  Fp32,
};

// Scratch bytes gemm_xwt_cuda needs for these sizes.
size_t gemm_scratch_bytes(int64_t m, int64_t k, int64_t n, DType w_dtype, GemmPrecision precision);

// Any m: the GEMV kernel up to kGemvMaxRows rows, cuBLAS beyond. The handle must already be bound
// to `stream` (cublasSetStream). scratch: device memory of gemm_scratch_bytes(...) bytes.
void gemm_xwt_cuda(cublasHandle_t handle, const float* x, int64_t m, int64_t k, int64_t ldx, const void* w,
                   DType w_dtype, int64_t n, const float* bias, float* y, int64_t ldy, void* scratch,
                   GemmPrecision precision, cudaStream_t stream);

}  // namespace cypris
