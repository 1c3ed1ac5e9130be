// Launchers for GPU-side sampling helpers. For now the greedy path only: a row-wise argmax over
// the logits, so a greedy step can download one id per row instead of a vocabulary of floats.
// CPU reference: argmax_rows_cpu in kernels/cpu/ops.h. (Temperature/top-k/top-p/min-p sampling
// on the GPU is not written yet; the CPU sampler handles every request.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cypris {

// out[r] = the index of the largest logits[r, :] (the first one on ties; NaNs are skipped).
// logits: [rows, vocab] fp32 with row stride ld.
void argmax_rows_cuda(const float* logits, int64_t rows, int64_t vocab, int64_t ld, int32_t* out, cudaStream_t stream);

}  // namespace cypris
