// Reading a quantized layer in a plain type (--dtype, or fp32 for the checks): the loaders of
// GPTQ/AWQ, EXL2, bitsandbytes and FP8 checkpoints dequantize it row by row to fp32 and convert
// each row to the type asked for, rows in parallel on the shared thread pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/common/dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {

// Writes rows [0, rows) of cols values each to dst as dtype (row r at r * dtype_nbytes(dtype,
// cols)): fill(r, out) puts row r's cols fp32 values into out. Tasks of 16 rows at the least.
template <class Fill>
void write_dequantized_rows(DType dtype, void* dst, int64_t rows, int64_t cols, const Fill& fill) {
  const size_t row_bytes = dtype_nbytes(dtype, cols);
  shared_thread_pool().parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
          fill(r, row.data());
          convert_from_f32(row.data(), dtype, static_cast<char*>(dst) + static_cast<size_t>(r) * row_bytes, cols);
        }
      },
      16);
}

}  // namespace cypris
