// Row predicate, input flattening and result conversion for the GPU sampler.
#include "engine/sampling/gpu_sampling.h"

#include <algorithm>

#include "engine/common/error.h"

namespace cypris {

bool gpu_sampling_supported(const SamplerRow& row, int max_log_probs) {
  const SamplingParams& p = *row.params;
  if (p.use_beam_search) return false;  // the beam search ranks the whole row itself
  const SamplerSet active = active_samplers(row);
  if (!active.subset_of(kGpuSamplers) || !p.in_default_order(active)) return false;
  if (p.logprobs && std::min(*p.logprobs, max_log_probs) > kMaxGpuTopLogprobs) return false;
  return true;
}

SamplingBatch GpuSamplingInputs::host_batch(const float* logits, int64_t ld, int32_t vocab) const {
  SamplingBatch b;
  b.logits = logits;
  b.ld = ld;
  b.rows = rows();
  b.vocab = vocab;
  b.params = params.data();
  if (!hist_offsets.empty()) {
    b.hist_offsets = hist_offsets.data();
    b.hist_ids = hist_ids.data();
  }
  if (!bias_offsets.empty()) {
    b.bias_offsets = bias_offsets.data();
    b.bias_ids = bias_ids.data();
    b.bias_values = bias_values.data();
  }
  b.max_top = max_top;
  return b;
}

void GpuSamplingOutputs::resize(int32_t rows, int32_t max_top) {
  tokens.assign(static_cast<size_t>(rows), -1);
  ranks.assign(static_cast<size_t>(rows), 0);
  logprobs.assign(static_cast<size_t>(rows), 0.0f);
  top_ids.assign(static_cast<size_t>(rows) * max_top, -1);
  top_logprobs.assign(static_cast<size_t>(rows) * max_top, 0.0f);
}

SamplingResults GpuSamplingOutputs::results() {
  return SamplingResults{tokens.data(), logprobs.data(), ranks.data(), top_ids.empty() ? nullptr : top_ids.data(),
                         top_logprobs.empty() ? nullptr : top_logprobs.data()};
}

GpuSamplingInputs build_gpu_sampling_inputs(std::span<const SamplerRow> rows, int max_log_probs) {
  GpuSamplingInputs in;
  bool any_penalty = false, any_bias = false;
  for (const SamplerRow& row : rows) {
    const SamplingParams& p = *row.params;
    CYPRIS_CHECK(gpu_sampling_supported(row, max_log_probs), "GPU sampling: a row uses a sampler the GPU lacks");
    any_penalty |= p.penalties_enabled();
    any_bias |= !p.logit_bias.empty();
  }
  in.params.reserve(rows.size());
  if (any_penalty) in.hist_offsets.push_back(0);
  if (any_bias) in.bias_offsets.push_back(0);
  for (const SamplerRow& row : rows) {
    const SamplingParams& p = *row.params;
    const SamplingState& s = *row.state;
    SamplingRowParams rp;
    rp.temperature = p.temperature;
    rp.top_p = p.top_p;
    rp.min_p = p.min_p;
    rp.top_k = p.top_k;
    if (p.penalties_enabled()) {
      rp.repetition_penalty = p.repetition_penalty;
      rp.presence_penalty = p.presence_penalty;
      rp.frequency_penalty = p.frequency_penalty;
      rp.num_prompt_ids = static_cast<int32_t>(s.prompt_ids().size());
      in.hist_ids.insert(in.hist_ids.end(), s.prompt_ids().begin(), s.prompt_ids().end());
      in.hist_ids.insert(in.hist_ids.end(), s.output_ids().begin(), s.output_ids().end());
    }
    if (any_penalty) in.hist_offsets.push_back(static_cast<int32_t>(in.hist_ids.size()));
    for (const auto& [id, bias] : p.logit_bias) {
      in.bias_ids.push_back(id);
      in.bias_values.push_back(bias);
    }
    if (any_bias) in.bias_offsets.push_back(static_cast<int32_t>(in.bias_ids.size()));
    if (p.logprobs) {
      rp.want_rank = 1;
      rp.num_top_logprobs = std::min(*p.logprobs, max_log_probs);
      in.max_top = std::max(in.max_top, rp.num_top_logprobs);
    }
    rp.seed = s.stream_key();
    rp.position = s.output_ids().size();
    in.params.push_back(rp);
  }
  return in;
}

std::vector<SampleOutput> finish_gpu_sampling(std::span<const SamplerRow> rows, const GpuSamplingInputs& in,
                                              const GpuSamplingOutputs& out) {
  std::vector<SampleOutput> samples(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    SampleOutput& o = samples[r];
    o.token = out.tokens[r];
    o.logprob = out.logprobs[r];
    o.rank = out.ranks[r];
    const int32_t n = in.params[r].num_top_logprobs;
    for (int32_t k = 0; k < n; ++k) {
      const size_t i = r * static_cast<size_t>(in.max_top) + static_cast<size_t>(k);
      if (out.top_ids[i] < 0) break;
      o.top_logprobs.push_back(TokenLogprob{out.top_ids[i], out.top_logprobs[i]});
    }
    rows[r].state->append(o.token);
  }
  return samples;
}

}  // namespace cypris
