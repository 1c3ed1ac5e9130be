// The CPU kernel of LoRA's grouped product (Backend::lora_linear): every row of a batch adds its own
// adapter's low-rank update, out[r] += scale[s] * (x[r] · A[s]ᵀ) · B[s]ᵀ with s = slots[r], in one
// pass over the thread pool for all rows and adapters (rows are grouped by their slot, so each
// adapter's A and B are read once per group of up to 64 rows, never one product per request). The
// reference for the CUDA kernels.
#pragma once

#include <cstdint>

namespace cypris {

class ThreadPool;

// x [t, k] (row stride ldx), slots [t] (< 0: row left alone), a [l, r, k], b [l, n, r], scales [l],
// out [t, n] (row stride ldo), all fp32. Slots must be < l (checked by the caller).
void lora_bgmv_f32(const float* x, int64_t ldx, const int32_t* slots, int64_t t, const float* a, const float* b,
                   const float* scales, int64_t r, int64_t k, int64_t n, float* out, int64_t ldo, ThreadPool* pool);

}  // namespace cypris
