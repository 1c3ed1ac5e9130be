// The engine's side of GPU sampling (no CUDA here): which rows the GPU sampler can take
// (gpu_sampling_supported), the flattened per-step inputs for kernels/cuda/sampling.h
// (build_gpu_sampling_inputs) and turning the device's results back into SampleOutputs.
// The GPU path implements logit_bias, repetition/presence/frequency penalties, temperature,
// top-k, top-p, min-p, a seeded Philox draw and raw logprobs (kGpuSamplers); a row that uses
// anything else goes to the CPU sampler (engine/sampling/sampler.h) in the same step, which draws
// from the same Philox stream.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling/sampler.h"
#include "kernels/common/sampling_types.h"

namespace cypris {

// What the GPU sampler implements, in the default chain order (penalties, temperature,
// top-k/top-p, min-p).
inline constexpr SamplerSet kGpuSamplers{
    SamplerFeature::LogitBias, SamplerFeature::Penalties, SamplerFeature::Temperature, SamplerFeature::TopP,
    SamplerFeature::TopK,      SamplerFeature::MinP,      SamplerFeature::Order};

// True when the row's features (active_samplers) are all in kGpuSamplers, run in the default order,
// and its top-N logprobs fit the GPU path.
bool gpu_sampling_supported(const SamplerRow& row, int max_log_probs);

// Host arrays of one step's sampling rows (the SamplingBatch without the logits).
struct GpuSamplingInputs {
  std::vector<SamplingRowParams> params;  // [rows]
  std::vector<int32_t> hist_offsets;      // [rows + 1]; empty when no row has a penalty
  std::vector<int32_t> hist_ids;
  std::vector<int32_t> bias_offsets;  // [rows + 1]; empty when no row has a bias
  std::vector<int32_t> bias_ids;
  std::vector<float> bias_values;
  int32_t max_top = 0;  // the largest top-N any row wants

  int32_t rows() const { return static_cast<int32_t>(params.size()); }
  // A SamplingBatch over these host arrays (for sample_rows_cpu, kernels/cpu/sampling.h).
  SamplingBatch host_batch(const float* logits, int64_t ld, int32_t vocab) const;
};

// What the device returns for one step (host copies of SamplingResults).
struct GpuSamplingOutputs {
  std::vector<int32_t> tokens, ranks, top_ids;
  std::vector<float> logprobs, top_logprobs;
  void resize(int32_t rows, int32_t max_top);
  SamplingResults results();  // pointers into these vectors
};

// Every row must satisfy gpu_sampling_supported (checked: Error otherwise).
GpuSamplingInputs build_gpu_sampling_inputs(std::span<const SamplerRow> rows, int max_log_probs);

// SampleOutputs of the rows as Sampler::sample returns them; appends each token to its row's state.
std::vector<SampleOutput> finish_gpu_sampling(std::span<const SamplerRow> rows, const GpuSamplingInputs& in,
                                              const GpuSamplingOutputs& out);

}  // namespace cypris
