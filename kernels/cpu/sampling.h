// The batched sampler of the GPU fast path, as plain data (shared with kernels/cuda/sampling.h) and
// its CPU reference. Per row: logit_bias, penalties (repetition over prompt + output, presence and
// frequency over the output), temperature, top-k, top-p, min-p, then a draw with the uniform of
// philox_uniform(seed, position) (temperature 0: argmax). Logprobs are of the RAW logits (as
// engine/sampling/sampler.h): the sampled token's logprob and rank and the top-N.
//
// The semantics are those of the engine's CPU sampler (engine/sampling/sampler_chain.cpp) for
// these parameters, and both draw in vocabulary order from the same Philox uniform
// (kernels/common/philox.h), so a seeded request gets the same tokens on either path. The shared
// structs live in kernels/common/sampling_types.h.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/sampling_types.h"

namespace cypris {

// The reference: row by row, sequential sums in double. Throws Error on bad sizes.
void sample_rows_cpu(const SamplingBatch& batch, const SamplingResults& out);

// The distribution row `row` draws from (normalised; 0 for every token the truncations drop;
// one-hot at the argmax for temperature 0). For tests: its support is what the draw can return.
std::vector<double> sampling_probs_cpu(const SamplingBatch& batch, int32_t row);

}  // namespace cypris
