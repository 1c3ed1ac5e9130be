// LayerNorm of whole rows (Cohere's input and final norms): one thread block per row, three strided
// passes over the row in global memory (mean; variance of the centred values, so no cancellation as
// in E[x²] - mean²; normalise and write), each statistic a block reduction in fp32. The row is read
// three times rather than held in registers: the norm runs twice per layer against GEMMs of H² per
// token, so the simple form is the cheap one to keep correct; rms_norm.cu has the register-held form
// if this ever shows in a profile.
#include "kernels/cuda/layer_norm.h"

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

// x, out [rows, hidden] of T (out may alias x: each thread reads only the elements it writes).
template <typename T>
static __global__ void layer_norm_kernel(const T* x, const float* __restrict__ w, const float* __restrict__ b,
                                         float eps, int64_t hidden, T* out) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * hidden;
  T* o = out + row * hidden;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) sum += to_float(xr[i]);
  const float mean = block_sum(sum, scratch) / static_cast<float>(hidden);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float c = to_float(xr[i]) - mean;
    ss += c * c;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / static_cast<float>(hidden) + eps);
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    o[i] = from_float<T>(w[i] * ((to_float(xr[i]) - mean) * inv) + (b ? b[i] : 0.0f));
  }
}

}  // namespace

void layer_norm_cuda(const void* x, DType dtype, const float* weight, const float* bias, float eps, int64_t rows,
                     int64_t hidden, void* out, cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && hidden > 0, "layer_norm_cuda: rows {} hidden {}", rows, hidden);
  if (rows == 0) return;
  int threads = 32;
  while (threads < 1024 && int64_t{threads} * 4 < hidden) threads *= 2;
  dispatch_float(dtype, "layer_norm_cuda", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
        static_cast<const T*>(x), weight, bias, eps, hidden, static_cast<T*>(out));
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
