// Column gather: one thread block per activation row (grid.y for more than 65535 rows), threads
// striding over the output columns, so that the index reads and the output writes are coalesced;
// the source reads are scattered within one row, which stays in L1/L2 (a row is at most a few
// tens of KiB). The gather is bandwidth-trivial next to the product that follows it.
#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gather_columns.h"

namespace cypris {
namespace {

template <typename T>
static __global__ void gather_columns_kernel(const T* __restrict__ x, int64_t rows, int64_t x_cols, int64_t x_ld,
                                             const int32_t* __restrict__ cols, int64_t n, T* __restrict__ out,
                                             int64_t out_ld) {
  const int64_t t = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  if (t >= rows) return;
  const T* src = x + t * x_ld;
  T* dst = out + t * out_ld;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const int32_t c = cols[j];
    dst[j] = c >= 0 && c < x_cols ? src[c] : T{0};
  }
}

}  // namespace

void gather_columns_cuda(const void* x, int64_t rows, int64_t x_cols, int64_t x_ld, size_t elem_bytes,
                         const int32_t* cols, int64_t n, void* out, int64_t out_ld, cudaStream_t stream) {
  CYPRIS_CHECK(elem_bytes == 2 || elem_bytes == 4, "gather_columns_cuda: elements of {} bytes (2 or 4 allowed)",
               elem_bytes);
  CYPRIS_CHECK(x_ld >= x_cols && out_ld >= n, "gather_columns_cuda: strides {} / {} for {} / {} columns", x_ld, out_ld,
               x_cols, n);
  if (rows <= 0 || n <= 0) return;
  const unsigned gx = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  const unsigned gy = static_cast<unsigned>((rows + gx - 1) / gx);
  const dim3 grid(gx, gy);
  const int threads = n >= 256 ? 256 : 128;
  if (elem_bytes == 4) {
    gather_columns_kernel<uint32_t><<<grid, threads, 0, stream>>>(static_cast<const uint32_t*>(x), rows, x_cols, x_ld,
                                                                  cols, n, static_cast<uint32_t*>(out), out_ld);
  } else {
    gather_columns_kernel<uint16_t><<<grid, threads, 0, stream>>>(static_cast<const uint16_t*>(x), rows, x_cols, x_ld,
                                                                  cols, n, static_cast<uint16_t*>(out), out_ld);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
