// The column gather of a linear layer kept with its input columns reordered (act-order GPTQ, EXL2:
// engine/backend/gather_columns.h): out[t, j] = x[t, cols[j]]. The CPU implementation and the
// reference of the CUDA kernel (kernels/cuda/gather_columns.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cypris {

// x [rows, >= max(cols) + 1] with row stride x_ld elements, out [rows, n] with row stride out_ld;
// elements of elem_bytes (2 or 4) bytes, copied as they are. cols are checked by the caller.
void gather_columns_cpu(const void* x, int64_t rows, int64_t x_ld, size_t elem_bytes, const int32_t* cols, int64_t n,
                        void* out, int64_t out_ld);

}  // namespace cypris
