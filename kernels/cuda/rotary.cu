// Rotary embedding on q and k of any float type (fp32 arithmetic). The grid is (token, group of
// heads): each block of kThreads threads rotates the (x[i], x[i + rot_dim/2]) pairs of as many
// heads as it has threads for, so even one token spreads over several blocks instead of one
// block looping over all heads. q and k are updated in place inside the fused qkv projection
// output, hence the row strides.
#include "kernels/cuda/rotary.h"

#include <algorithm>

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 128;

template <typename T>
static __global__ void rotary_kernel(T* __restrict__ q, int64_t ldq, int num_q_heads, T* __restrict__ k, int64_t ldk,
                                     int num_kv_heads, int head_dim, int rot_dim, int heads_per_block,
                                     const int32_t* __restrict__ positions, const float* __restrict__ cos_sin,
                                     int64_t max_pos) {
  const int64_t t = blockIdx.x;
  const int pos = positions[t];
  if (pos < 0 || pos >= max_pos) return;
  const int half = rot_dim / 2;
  const float* c = cos_sin + static_cast<int64_t>(pos) * rot_dim;
  const float* s = c + half;
  const int h0 = blockIdx.y * heads_per_block;
  const int h_end = min(h0 + heads_per_block, num_q_heads + num_kv_heads);
  const int pairs = (h_end - h0) * half;
  for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
    const int h = h0 + idx / half;
    const int i = idx % half;
    T* head = h < num_q_heads ? q + t * ldq + static_cast<int64_t>(h) * head_dim
                              : k + t * ldk + static_cast<int64_t>(h - num_q_heads) * head_dim;
    float r1, r2;
    rotate_pair(to_float(head[i]), to_float(head[i + half]), c[i], s[i], &r1, &r2);
    head[i] = from_float<T>(r1);
    head[i + half] = from_float<T>(r2);
  }
}

}  // namespace

void rotary_cuda(void* q, int64_t ldq, int num_q_heads, void* k, int64_t ldk, int num_kv_heads, DType dtype,
                 int head_dim, int rot_dim, const int32_t* positions, int64_t num_tokens, const float* cos_sin,
                 int64_t max_pos, cudaStream_t stream) {
  CYPRIS_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim && num_q_heads >= 0 && num_kv_heads >= 0,
               "rotary_cuda: rot_dim {} head_dim {}", rot_dim, head_dim);
  const int heads = num_q_heads + num_kv_heads;
  if (num_tokens <= 0 || heads == 0) return;
  const int heads_per_block = std::max(1, kThreads / (rot_dim / 2));
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>((heads + heads_per_block - 1) / heads_per_block));
  dispatch_float(dtype, "rotary_cuda", [&](auto tag) {
    using T = decltype(tag);
    rotary_kernel<<<grid, kThreads, 0, stream>>>(static_cast<T*>(q), ldq, num_q_heads, static_cast<T*>(k), ldk,
                                                 num_kv_heads, head_dim, rot_dim, heads_per_block, positions, cos_sin,
                                                 max_pos);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
