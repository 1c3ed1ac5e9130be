// Launcher for causal attention over the paged KV cache on the GPU, for a flattened batch that
// mixes prefill chunks and decodes (GQA, optional sliding window). CPU reference:
// paged_attention_cpu in kernels/cpu/attention.h (same parameters, same semantics).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/common/dtype.h"
#include "kernels/cpu/attention.h"  // PagedAttentionParams

namespace cypris {

// The CPU kernel's parameters (pointers here are device memory; head_dim at most 256; io_dtype F32, BF16 or
// F16; any KV cache type of is_kv_cache_dtype) plus the launch bounds.
struct PagedAttentionCudaParams : PagedAttentionParams {
  int64_t num_tokens = 0;
  // Host-side bounds used to size the grid (0: derive from num_tokens and the block table width).
  int max_query_len = 0;
  int max_seq_len = 0;
};

// Bytes of scratch memory paged_attention_cuda needs for these parameters (split-K partials). Depends on
// the current device (its SM count) and on the cache pointers' alignment: call it with the same
// parameters, on the same device, as paged_attention_cuda.
size_t paged_attention_workspace_bytes(const PagedAttentionCudaParams& p);

// workspace: device memory of at least paged_attention_workspace_bytes(p) bytes (may be null when 0).
// Metadata must be consistent (the runner validates the batch on the host first).
void paged_attention_cuda(const PagedAttentionCudaParams& p, void* workspace, cudaStream_t stream);

}  // namespace cypris
