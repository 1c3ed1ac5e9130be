// The Backend's sampling op on the CPU (CpuBackend::sample_rows) over the plain data shared with
// the GPU sampler (kernels/common/sampling_types.h), and the GPU sampler's reference. Per row:
// logit_bias, penalties (repetition over prompt + output, presence and frequency over the output),
// temperature, top-k, top-p, min-p, then a draw with the uniform of philox_uniform(seed, position)
// (temperature 0: argmax). Logprobs are of the RAW logits (as engine/sampling/sampler.h): the
// sampled token's logprob and rank and the top-N.
//
// It runs the CPU's one implementation of each of these samplers (kernels/cpu/samplers.h), the same
// functions the engine's sampler chain runs, so a seeded request gets the same tokens from either,
// and from the GPU sampler, which draws in vocabulary order from the same Philox uniform
// (kernels/common/philox.h).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/sampling_types.h"

namespace cypris {

// Row by row. Throws Error on bad sizes.
void sample_rows_cpu(const SamplingBatch& batch, const SamplingResults& out);

// The distribution row `row` draws from (normalised; 0 for every token the truncations drop;
// one-hot at the argmax for temperature 0). For tests: its support is what the draw can return.
std::vector<double> sampling_probs_cpu(const SamplingBatch& batch, int32_t row);

}  // namespace cypris
