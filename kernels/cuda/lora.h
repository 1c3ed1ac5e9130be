// Launchers of LoRA's grouped product on the GPU (Backend::lora_linear): one launch per projection
// for every row of the batch, each row adding its own adapter's update (BGMV, decode), or two for a
// prefill (SGMV: shrink, then expand, over tiles of rows grouped by adapter). Activations and
// adapter weights are F32, F16 or BF16 (`dtype`), arithmetic fp32. CPU reference: lora_bgmv_f32
// (kernels/cpu/lora.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// out[row] += scales[s] * (x[row] · a[s]ᵀ) · b[s]ᵀ for each row with s = slots[row] >= 0; x [t, k]
// (row stride ldx), slots I32 [t], a [l, r, k], b [l, n, r] contiguous, scales F32 [l], out [t, n]
// (row stride ldo); slots, scales and the tensors in device memory. r <= 256.
void lora_bgmv_cuda(const void* x, int64_t ldx, const int32_t* slots, int64_t t, const void* a, const void* b,
                    const float* scales, int64_t r, int64_t k, int64_t n, void* out, int64_t ldo, DType dtype,
                    cudaStream_t stream);

// The same product for prefill-sized batches (rows in runs of one adapter), as a segmented GEMM: a
// shrink launch into tmp (F32 [t, r], device scratch the caller provides, fully written for rows
// with a slot), then an expand launch adding tmp·B_sᵀ. Same arguments and result as lora_bgmv_cuda.
void lora_sgmv_cuda(const void* x, int64_t ldx, const int32_t* slots, int64_t t, const void* a, const void* b,
                    const float* scales, int64_t r, int64_t k, int64_t n, void* out, int64_t ldo, float* tmp,
                    DType dtype, cudaStream_t stream);

}  // namespace cypris
