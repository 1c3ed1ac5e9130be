// Launchers for the linear layers on the GPU: y = x · Wᵀ (+ bias) with F32/F16/BF16 activations,
// weights and outputs (fp32 accumulation; the bias is fp32). Few rows (decode) go to a memory-bound GEMV kernel that streams the
// weights once; more rows go to cuBLAS (tensor cores for 16-bit weights, fp32 accumulation).
// CPU reference: gemm_xwt in kernels/cpu/gemm.h.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/common/dtype.h"
#include "kernels/common/gemm_group.h"

namespace cypris {

// Up to this many rows the GEMV kernel is used.
inline constexpr int64_t kGemvMaxRows = 8;

// Whether the GEMV kernel takes these types: x and y fp32, or x in the (16-bit) weight type and y
// in that type or fp32.
bool gemv_supported(DType x_dtype, DType w_dtype, DType y_dtype);

// The GEMV kernel alone (m <= kGemvMaxRows, gemv_supported types): x [m, k] with row stride ldx;
// w [n, k] row-major in w_dtype; bias [n] fp32 or null; y [m, n] with row stride ldy. fp32 accumulation.
void gemv_xwt_cuda(const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype,
                   int64_t n, const float* bias, void* y, DType y_dtype, int64_t ldy, cudaStream_t stream);

// Groups one grouped GEMV launch takes (kernel parameters, no upload); more go in several launches.
inline constexpr int kGemvGroupsPerLaunch = 64;

// The grouped GEMV (a MoE projection at decode): for each group, y[first, first + rows) = x[first,
// first + rows) · w_gᵀ, every w_g [n, k] in w_dtype, rows <= kGemvMaxRows, gemv_supported types,
// no bias. One launch for up to kGemvGroupsPerLaunch groups (grid rows), instead of one per group.
void gemv_grouped_xwt_cuda(const void* x, DType x_dtype, int64_t k, int64_t ldx, const GemmGroup* groups,
                           int64_t num_groups, DType w_dtype, int64_t n, void* y, DType y_dtype, int64_t ldy,
                           cudaStream_t stream);

// The grouped GEMM (a MoE projection at prefill): the same product on tensor cores as one
// cublasGemmGroupedBatchedEx call over all groups, for x, w and y all of one 16-bit type. The
// call's pointer arrays go to device memory `ptr_scratch` (3 * num_groups pointers). Returns false
// (nothing queued) when cuBLAS does not support the call, so the caller can run the groups one by one.
bool gemm_grouped_cuda(cublasHandle_t handle, const void* x, int64_t k, int64_t ldx, const GemmGroup* groups,
                       int64_t num_groups, DType dtype, int64_t n, void* y, int64_t ldy, void** ptr_scratch,
                       cudaStream_t stream);

enum class GemmPrecision {
  // 16-bit weights: activations are rounded to the weight dtype and multiplied on tensor cores
  // with fp32 accumulation (vLLM's numerics).
  Fast,
  // 16-bit weights are widened to fp32 in bounded tiles and multiplied in fp32 (matches the CPU
  // backend's numerics; for equivalence tests, slower and uses more scratch).
  Fp32,
};

// Scratch bytes gemm_xwt_cuda needs for these sizes and types.
size_t gemm_scratch_bytes(int64_t m, int64_t k, int64_t n, DType x_dtype, DType w_dtype, DType y_dtype,
                          GemmPrecision precision);

// Any m and any F32/F16/BF16 types: the GEMV kernel up to kGemvMaxRows rows, cuBLAS beyond
// (cublasGemmEx on tensor cores straight from 16-bit activations of the weight's type into a
// 16-bit or fp32 output; other combinations convert through scratch). The handle must already be
// bound to `stream` (cublasSetStream). scratch: device memory of gemm_scratch_bytes(...) bytes.
void gemm_xwt_cuda(cublasHandle_t handle, const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ldx,
                   const void* w, DType w_dtype, int64_t n, const float* bias, void* y, DType y_dtype, int64_t ldy,
                   void* scratch, GemmPrecision precision, cudaStream_t stream);

}  // namespace cypris
