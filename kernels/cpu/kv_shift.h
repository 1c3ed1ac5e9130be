// --context-shift by rotation (docs/context_shift.md): moves cached tokens between slots of one
// layer's paged KV cache and rotates each moved key to its new position. RoPE turns a key by an
// angle proportional to its position, so a key cached at position p becomes the key at position q
// by a further rotation of angle(q) - angle(p); the values do not depend on the position and move
// as they are. The reference of the CUDA kernel (kernels/cuda/kv_shift.h).
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// One layer's caches [num_slots, num_kv_heads, head_dim] (a slot is block * block_size + offset)
// of cache_dtype (F32, F16, BF16, F8E4M3, F8E5M2). For each move i (src_dst[2i] -> src_dst[2i+1]):
// k_cache[dst] = rotate(k_cache[src], cos_sin row i), v_cache[dst] = v_cache[src]. Every source is
// read before any destination is written, so moves may overlap (a slot both read and written).
// The rotation is Neox's (rotate_half) over the first rot_dim dims of every head: with h = rot_dim
// / 2, c = cos_sin[i * rot_dim + j], s = cos_sin[i * rot_dim + h + j] for j < h:
//   k'[j] = k[j] c - k[j + h] s,   k'[j + h] = k[j + h] c + k[j] s;
// rot_dim 0 (or cos_sin null): keys move unrotated. 16-bit caches are read to fp32, rotated and
// rounded to nearest even; fp8 caches are dequantized with k_scale, rotated and quantized again
// with it (values move as bytes). Throws cypris::Error on a slot out of range or a bad shape.
void move_kv_slots_cpu(void* k_cache, void* v_cache, int64_t num_slots, DType cache_dtype, int num_kv_heads,
                       int head_dim, int rot_dim, const int64_t* src_dst, int64_t num_moves, const float* cos_sin,
                       float k_scale);

}  // namespace cypris
