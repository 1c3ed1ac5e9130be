// Rotary embedding: one thread block per token; each thread rotates (x[i], x[i + rot_dim/2])
// pairs of q and k heads, reading the token's cos/sin row once from the table (it stays in L1).
// q and k are updated in place inside the fused qkv projection output, hence the row strides.
#include "kernels/cuda/rotary.h"

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"

namespace cypris {
namespace {

static __global__ void rotary_kernel(float* __restrict__ q, int64_t ldq, int num_q_heads, float* __restrict__ k,
                                     int64_t ldk, int num_kv_heads, int head_dim, int rot_dim,
                                     const int32_t* __restrict__ positions, const float* __restrict__ cos_sin,
                                     int64_t max_pos) {
  const int64_t t = blockIdx.x;
  const int pos = positions[t];
  if (pos < 0 || pos >= max_pos) return;
  const int half = rot_dim / 2;
  const float* c = cos_sin + static_cast<int64_t>(pos) * rot_dim;
  const float* s = c + half;
  const int pairs = (num_q_heads + num_kv_heads) * half;
  for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
    const int h = idx / half;
    const int i = idx % half;
    float* head = h < num_q_heads ? q + t * ldq + static_cast<int64_t>(h) * head_dim
                                  : k + t * ldk + static_cast<int64_t>(h - num_q_heads) * head_dim;
    const float x1 = head[i];
    const float x2 = head[i + half];
    head[i] = x1 * c[i] - x2 * s[i];
    head[i + half] = x2 * c[i] + x1 * s[i];
  }
}

}  // namespace

void rotary_cuda(float* q, int64_t ldq, int num_q_heads, float* k, int64_t ldk, int num_kv_heads, int head_dim,
                 int rot_dim, const int32_t* positions, int64_t num_tokens, const float* cos_sin, int64_t max_pos,
                 cudaStream_t stream) {
  CYPRIS_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim && num_q_heads >= 0 && num_kv_heads >= 0,
               "rotary_cuda: rot_dim {} head_dim {}", rot_dim, head_dim);
  if (num_tokens <= 0) return;
  rotary_kernel<<<static_cast<unsigned>(num_tokens), 128, 0, stream>>>(q, ldq, num_q_heads, k, ldk, num_kv_heads,
                                                                      head_dim, rot_dim, positions, cos_sin, max_pos);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
