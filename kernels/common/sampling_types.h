// The plain data the samplers of both devices share: one row's parameters (SamplingRowParams),
// a batch's inputs (SamplingBatch) and outputs (SamplingResults), and the top-p tie rule. The CUDA
// kernels (kernels/cuda/sampling.h), their CPU reference (kernels/cpu/sampling.h) and the engine
// (engine/sampling/gpu_sampling.h) all include this one definition. C++17, no CUDA headers.
#pragma once

#include <cstdint>

#include "kernels/common/philox.h"  // CYPRIS_HD, philox_uniform

namespace cypris {

// The most top-N logprobs the GPU path returns per row (more go to the CPU sampler).
constexpr int32_t kMaxGpuTopLogprobs = 64;

// One row's parameters (a POD copied to the device as is).
struct SamplingRowParams {
  float temperature = 1.0f;  // 0: greedy (argmax after bias and penalties)
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t top_k = 0;             // <= 0 or >= vocab: off
  int32_t num_top_logprobs = 0;  // top-N entries wanted (<= the batch's max_top)
  int32_t want_rank = 0;         // 1: compute the sampled token's rank (logprobs requested)
  int32_t num_prompt_ids = 0;    // the first entries of the row's history are prompt ids, the rest output
  uint64_t seed = 0;             // Philox key of the request's stream
  uint64_t position = 0;         // Philox counter: the output position being sampled
};

// Inputs of one batch. Pointers are device pointers for the CUDA launcher, host ones for the CPU.
struct SamplingBatch {
  const float* logits = nullptr;  // [rows, ld], the first `vocab` columns used; not modified
  int64_t ld = 0;
  int32_t rows = 0;
  int32_t vocab = 0;
  const SamplingRowParams* params = nullptr;  // [rows]
  // Token history (prompt then output ids) of row r: hist_ids[hist_offsets[r] .. hist_offsets[r + 1]).
  // Ids outside [0, vocab) are ignored. May be null when no row has a penalty.
  const int32_t* hist_offsets = nullptr;  // [rows + 1]
  const int32_t* hist_ids = nullptr;
  // logit_bias of row r: (bias_ids[j], bias_values[j]) for j in [bias_offsets[r], bias_offsets[r + 1]),
  // each id at most once per row. May be null when no row has a bias.
  const int32_t* bias_offsets = nullptr;  // [rows + 1]
  const int32_t* bias_ids = nullptr;
  const float* bias_values = nullptr;
  int32_t max_top = 0;  // row stride of the top-N outputs
};

// Outputs of one batch (device pointers for CUDA, host for the CPU).
struct SamplingResults {
  int32_t* tokens = nullptr;      // [rows]
  float* logprobs = nullptr;      // [rows] logprob of the token under log_softmax(raw logits)
  int32_t* ranks = nullptr;       // [rows] 1 = most likely raw logit; 0 when want_rank is 0
  int32_t* top_ids = nullptr;     // [rows, max_top] most likely first; -1 past num_top_logprobs
  float* top_logprobs = nullptr;  // [rows, max_top]; null ids/logprobs allowed when max_top == 0
};

// Top-p keeps the most likely tokens until the mass strictly ahead of a token reaches `target`
// (at least one token). With tau the value of the token where that happens, every token above tau
// is kept and the tokens equal to tau (each of mass e_tie) are kept in vocabulary order: this many.
CYPRIS_HD int32_t top_p_ties_to_keep(double above_mass, int32_t above_count, double e_tie, int32_t num_ties,
                                     double target) {
  int32_t keep = 0;
  double ahead = above_mass;
  while (keep < num_ties && (above_count + keep == 0 || ahead < target)) {
    ahead += e_tie;
    ++keep;
  }
  return keep;
}

}  // namespace cypris
