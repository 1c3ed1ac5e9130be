// Launchers for row lookups on the GPU: the token embedding (F32/F16/BF16 table to rows of the activation type) and
// the gather of the rows whose logits are needed. CPU references: embedding_cpu, gather_rows_cpu
// in kernels/cpu/ops.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// out[t, :] = table[ids[t], :] as fp32. An id outside [0, vocab) yields a row of zeros (the runner
// validates ids on the host before the forward; the kernel only keeps memory safe).
// out is of out_dtype (F32, F16 or BF16).
void embedding_cuda(const int32_t* ids, int64_t num_tokens, const void* table, DType table_dtype, int64_t vocab,
                    int64_t hidden, void* out, DType out_dtype, cudaStream_t stream);

// out[r, :] = x[indices[r], :]; x [num_rows_x, hidden] contiguous, elements of elem_bytes bytes (any
// type: rows are copied). Out-of-range indices give zeros.
void gather_rows_cuda(const void* x, size_t elem_bytes, int64_t num_rows_x, int64_t hidden, const int32_t* indices,
                      int64_t count, void* out, cudaStream_t stream);

// out[indices[r], :] += weights[r] * src[r, :] (one expert's rows back to their tokens); indices
// distinct within a call, so no two blocks write one row; out-of-range indices are skipped.
// CPU reference: scatter_add_rows_cpu.
// src and out of `dtype` (F32/F16/BF16), weights fp32.
void scatter_add_rows_cuda(const void* src, DType dtype, int64_t count, int64_t hidden, const int32_t* indices,
                           const float* weights, void* out, int64_t rows_out, cudaStream_t stream);

}  // namespace cypris
