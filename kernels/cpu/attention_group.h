// Internal to kernels/cpu: one work item of the vectorised paged attention (attention.cpp hands it
// out), the query heads of one KV head for one query token, and the AVX-512 / AVX2 kernels that run
// it. Every cached row is read once per item for all the heads of the group and converted in
// registers (16-bit: F16C / a shift; fp8: widened to fp16 with integer shifts, times the layer's
// scale), so a 16-bit cache reads half the bytes of an fp32 one and an fp8 cache a quarter.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris::attention_detail {

struct GroupAttention {
  const float* q;  // first query head of the group; heads d apart
  float* out;      // same layout
  const void* k_cache;
  const void* v_cache;
  const int64_t* offsets;  // n cached-row offsets (elements) of this KV head
  int64_t n;
  int d;
  float scale;
  float softcap;
  float* scores;  // [group, n]
  float k_mul;    // fp8 only: fp8_load_factor * k_scale, the factor the fp8 loads apply to K rows
  float v_mul;
};

// out[h] = softmax(scale * q[h] . K) V for the group's heads. inv_sum: scratch of `group` floats.
// avx512: d a multiple of 16; avx2: d a multiple of 8. cache_dtype: any is_kv_cache_dtype type.
void attend_group_avx512(DType cache_dtype, const GroupAttention& a, int group, float* inv_sum);
void attend_group_avx2(DType cache_dtype, const GroupAttention& a, int group, float* inv_sum);

}  // namespace cypris::attention_detail
