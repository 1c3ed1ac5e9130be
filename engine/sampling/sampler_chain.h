// Internal to the sampler: the logits processors driven by a request's parameters and state
// (pre-chain masks, penalties' history, DRY, no-repeat n-gram, dynamic temperature) and the chain
// that runs the samplers in the request's order. Each sampler's math is the CPU's one implementation
// in kernels/cpu/samplers.h, which the Backend's CPU sampling op runs too.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/request/sampling_params.h"
#include "kernels/cpu/samplers.h"

namespace cypris {

class SamplingState;

namespace sampling_detail {

using cpu_sampling::kNegInf;
using cpu_sampling::RowBuffers;
using cpu_sampling::RowLogits;

// --- the processors that read SamplingParams / SamplingState; each is a no-op when its parameter is off ---
void apply_pre_chain(RowLogits& row, const SamplingParams& p, const SamplingState& s,
                     std::optional<int32_t> eos_token_id, const uint32_t* allowed_mask);
void apply_penalties(RowLogits& row, const SamplingParams& p, const SamplingState& s);
void apply_dry(RowLogits& row, const SamplingParams& p, const SamplingState& s);
void apply_no_repeat_ngram(RowLogits& row, const SamplingParams& p, const SamplingState& s);
// Temperature, or dynamic temperature (entropy-scaled between dynatemp_min and dynatemp_max).
void apply_temperature(RowLogits& row, const SamplingParams& p);

// Runs the chain in the row's order (greedy rows skip the samplers that cannot change the argmax).
void run_chain(RowLogits& row, const SamplingParams& p, SamplingState& s);

}  // namespace sampling_detail
}  // namespace cypris
