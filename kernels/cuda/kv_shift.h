// Launchers for --context-shift by rotation: moving cached tokens between slots of a layer's paged
// KV cache with each moved key rotated to its new position. CPU reference: move_kv_slots_cpu
// (kernels/cpu/kv_shift.h), whose comment states the arithmetic.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// Device pointers throughout. Caches [num_slots, kv_width = num_kv_heads * head_dim] of cache_dtype
// (F32, F16, BF16, F8E4M3, F8E5M2); src_dst [num_moves, 2] slot pairs (validated by the caller);
// cos_sin [num_moves, rot_dim] or null (rot_dim 0). key_scratch F32 [num_moves, kv_width] and
// value_scratch [num_moves, kv_width] elements of cache_dtype: the gathered sources, so that moves
// may overlap (every read happens in the first launch, every write in the second).
void move_kv_slots_cuda(void* k_cache, void* v_cache, DType cache_dtype, int num_kv_heads, int head_dim, int rot_dim,
                        const int64_t* src_dst, int64_t num_moves, const float* cos_sin, float k_scale,
                        float* key_scratch, void* value_scratch, cudaStream_t stream);

}  // namespace cypris
