// Launcher of the column gather of a linear layer kept with its input columns reordered (act-order
// GPTQ, EXL2): out[t, j] = x[t, cols[j]]. CPU reference: gather_columns_cpu (kernels/cpu/gather_columns.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cypris {

// x [rows, x_ld] (row stride x_ld elements), out [rows, n] (row stride out_ld), elements of
// elem_bytes (2 or 4) bytes copied as they are; cols [n] device indices in [0, x_cols), checked
// at load (a column outside gives 0: the kernel only keeps memory safe).
void gather_columns_cuda(const void* x, int64_t rows, int64_t x_cols, int64_t x_ld, size_t elem_bytes,
                         const int32_t* cols, int64_t n, void* out, int64_t out_ld, cudaStream_t stream);

}  // namespace cypris
