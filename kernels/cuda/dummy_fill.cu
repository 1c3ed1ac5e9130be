// Dummy weights on the device: one thread per element in a grid-stride loop, each evaluating the
// counter-based dummy_value (kernels/common/dummy_fill.h) of its source index and storing it in
// the weight's dtype. Pure write bandwidth plus a little integer hashing: an 8B model's 16 GB of
// bf16 take milliseconds. A run whose source rows are contiguous (the common case) skips the
// 64-bit division that maps an element to its row.
#include <algorithm>

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dummy_fill.h"

namespace cypris {
namespace {

using namespace cuda_detail;

template <typename T>
static __global__ void dummy_fill_kernel(T* __restrict__ dst, int64_t total, int64_t row_len, int64_t src_offset,
                                         int64_t src_row_stride, bool contiguous, uint64_t key, float scale) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < total; j += step) {
    int64_t src = src_offset + j;
    if (!contiguous) {
      const int64_t r = j / row_len;
      src = src_offset + r * src_row_stride + (j - r * row_len);
    }
    dst[j] = from_float<T>(dummy_value(key, scale, static_cast<uint64_t>(src)));
  }
}

template <typename T>
void launch(void* dst, const DummyFill& run, cudaStream_t stream) {
  const int64_t total = run.rows * run.row_len;
  const bool contiguous = run.rows == 1 || run.src_row_stride == run.row_len;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t{1} << 16);
  dummy_fill_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<T*>(dst) + run.dst_offset, total, run.row_len, run.src_offset, run.src_row_stride, contiguous,
      run.key, run.scale);
}

}  // namespace

void dummy_fill_cuda(void* dst, DType dtype, const DummyFill& run, cudaStream_t stream) {
  CYPRIS_CHECK(run.rows >= 0 && run.row_len >= 0 && run.dst_offset >= 0 && run.src_offset >= 0,
               "dummy_fill_cuda: a run of {} x {} at {} from {}", run.rows, run.row_len, run.dst_offset,
               run.src_offset);
  if (run.rows * run.row_len == 0) return;
  CYPRIS_CHECK(dst != nullptr, "dummy_fill_cuda: null destination");
  switch (dtype) {
    case DType::F32:
      launch<float>(dst, run, stream);
      break;
    case DType::F16:
      launch<__half>(dst, run, stream);
      break;
    case DType::BF16:
      launch<__nv_bfloat16>(dst, run, stream);
      break;
    default:
      CYPRIS_FAIL("dummy_fill_cuda: dtype {} is not supported (float32, float16, bfloat16)", dtype_name(dtype));
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
