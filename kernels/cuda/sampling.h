// Launchers for GPU-side sampling: a row-wise argmax (greedy rows) and the batched sampler of the
// GPU fast path (bias, penalties, temperature, top-k, top-p, min-p, a Philox draw, raw logprobs),
// so a step downloads a few numbers per row instead of a vocabulary of floats. The parameters and
// results are the plain structs of kernels/common/sampling_types.h; CPU references: argmax_rows_cpu
// (kernels/cpu/ops.h) and sample_rows_cpu (kernels/cpu/sampling.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/sampling_types.h"

namespace cypris {

// out[r] = the index of the largest logits[r, :] (the first one on ties; NaNs are skipped).
// logits: [rows, vocab] fp32 with row stride ld.
void argmax_rows_cuda(const float* logits, int64_t rows, int64_t vocab, int64_t ld, int32_t* out, cudaStream_t stream);

// Scratch the sampler needs: `work` [rows, vocab] fp32 (the processed logits) and `counts`
// [rows, vocab] int32 that must be all zero before the first call; the kernel leaves it all zero.
inline size_t sampling_work_elements(int64_t rows, int64_t vocab) {
  return static_cast<size_t>(rows) * static_cast<size_t>(vocab);
}

// One token per row, with logprobs, as sample_rows_cpu computes them (same uniform from Philox).
// All pointers in `batch` and `out` are device pointers. One thread block per row.
void sample_rows_cuda(const SamplingBatch& batch, const SamplingResults& out, float* work, int32_t* counts,
                      cudaStream_t stream);

}  // namespace cypris
