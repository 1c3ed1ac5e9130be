// Argument checks shared by every Backend implementation: dtypes, ranks, contiguity and shape
// agreement of each op's tensors (and the paged-attention parameters built from them). A backend calls these before it launches anything, so a bad
// call is a cypris::Error naming the backend and the argument on the CPU and on the GPU alike.
#pragma once

#include <cstdint>

#include "engine/backend/backend.h"
#include "kernels/cpu/attention.h"  // PagedAttentionParams

namespace cypris::backend_checks {

// `backend` is the name the messages start with ("cpu backend", "cuda backend"); `act` is the
// backend's activation dtype (Backend::activation_dtype()), which every activation tensor has (a
// linear output may also be float32: the logits).
void require(const char* backend, const Tensor& t, DType dtype, int ndim, const char* what);
// Dense rows: contiguous, or 2-D with a row stride equal to the width.
void require_contiguous(const char* backend, const Tensor& t, const char* what);

void check_embedding(const char* backend, DType act, const Tensor& ids, const Tensor& table, const Tensor& out);
void check_linear(const char* backend, DType act, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out);
// Shapes and types of Backend::grouped_linear; returns whether any group has rows.
bool check_grouped_linear(const char* backend, DType act, const Tensor& x, const std::vector<LinearGroup>& groups,
                          const Tensor& out);
// Shapes and types of Backend::lora_linear: x [T, K] and out [T, N] (act, row-strided), slots I32
// [T], a [L, R, K] and b [L, N, R] contiguous in act, scales F32 [L].
void check_lora_linear(const char* backend, DType act, const Tensor& x, const Tensor& slots, const Tensor& a,
                       const Tensor& b, const Tensor& scales, const Tensor& out);
void check_rms_norm(const char* backend, DType act, const Tensor& x, const Tensor& w, const Tensor& out);
void check_fused_add_rms_norm(const char* backend, DType act, const Tensor& x, const Tensor& residual, const Tensor& w);
void check_rotary(const char* backend, DType act, const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& cos_sin,
                  int head_dim);
// Returns the width of one cache row (num_kv_heads * head_dim).
int64_t check_write_kv_cache(const char* backend, DType act, const Tensor& k, const Tensor& v, const AttentionMetadata& meta,
                             const Tensor& k_cache, const Tensor& v_cache);
// Dtypes and ranks, q and out of equal shape and a whole number of heads, metadata with
// num_seqs + 1 query starts.
void check_paged_attention(const char* backend, DType act, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const AttentionMetadata& meta, const Tensor& out);
// check_paged_attention, then the kernel parameters every backend fills the same way (pointers are
// the tensors' own: host memory on the CPU, device memory on a GPU).
PagedAttentionParams paged_attention_params(const char* backend, DType act, const Tensor& q, const Tensor& k_cache,
                                            const Tensor& v_cache, const AttentionMetadata& meta, float scale,
                                            int sliding_window, Tensor& out, const KvCacheScales& kv_scales,
                                            float softcap = 0.0f);
// silu_and_mul and gelu_tanh_and_mul.
void check_silu_and_mul(const char* backend, DType act, const Tensor& x, const Tensor& out);
void check_rms_norm_heads(const char* backend, DType act, const Tensor& x, const Tensor& w);
void check_layer_norm(const char* backend, DType act, const Tensor& x, const Tensor& w, const Tensor* bias,
                      const Tensor& out);
void check_layer_norm_heads(const char* backend, DType act, const Tensor& x, const Tensor& w);
void check_scale_and_cap(const char* backend, DType act, const Tensor& x, float scale, float cap);
void check_scatter_add_rows(const char* backend, DType act, const Tensor& src, const Tensor& indices, const Tensor& weights,
                            const Tensor& out);
// Every dummy-fill run lies inside a weight of `numel` elements.
void check_dummy_runs(const char* backend, int64_t numel, const std::vector<DummyFill>& runs);
void check_add(const char* backend, DType act, const Tensor& x, const Tensor& out);
void check_gather_rows(const char* backend, DType act, const Tensor& x, const Tensor& indices, const Tensor& out);

}  // namespace cypris::backend_checks
