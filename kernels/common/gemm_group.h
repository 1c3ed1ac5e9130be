// A grouped product: several weights of one shape and type, each multiplying its own run of
// consecutive rows of one activation matrix (the experts of a mixture-of-experts layer, each with
// the rows routed to it). Shared by the CPU kernels (gemm_xwt_grouped, quant_gemm_xwt_grouped) and
// the CUDA ones (gemm_grouped_cuda, quant_gemv_grouped_cuda).
#pragma once

#include <cstdint>

namespace cypris {

// y[first, first + rows) = x[first, first + rows) · wᵀ.
struct GemmGroup {
  const void* w = nullptr;  // [n, k] row-major, in the grouped call's weight type
  int64_t first = 0;        // first row of x and of y
  int64_t rows = 0;
};

}  // namespace cypris
