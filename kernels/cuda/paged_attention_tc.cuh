// Internal to the paged attention family (kernels/cuda/paged_attention*.cu): the tensor-core prefill
// kernel of paged_attention_tc.cu, used by paged_attention_cuda for prefill / mixed batches when q and
// the cache are the same 16-bit type.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/paged_attention.h"

// Compile-time switch for the tensor-core prefill path (1: used where eligible; 0: every prefill runs
// the scalar kernel).
#ifndef CYPRIS_ATTN_TC_PREFILL
#define CYPRIS_ATTN_TC_PREFILL 1
#endif

namespace cypris::cuda_detail {

// True when launch_prefill_tc takes these parameters: io_dtype == cache_dtype in {BF16, F16}, head_dim
// 64, 80, 96, 128 or 256, 16-byte aligned q and cache, ldq a multiple of 8, ldo even.
bool prefill_tc_eligible(const PagedAttentionCudaParams& p);

// False when the environment sets CYPRIS_ATTN_FAST=0: the GQA decode and tensor-core prefill kernels
// are then skipped for the scalar ones (A/B timings and bisecting on a GPU without a rebuild).
bool attention_fast_paths();

void launch_prefill_tc(const PagedAttentionCudaParams& p, cudaStream_t stream);

}  // namespace cypris::cuda_detail
