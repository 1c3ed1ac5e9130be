// The Backend's sampling op on the CPU: each row of a SamplingBatch through the samplers of
// kernels/cpu/samplers.h in the GPU path's order.
#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "engine/common/error.h"
#include "kernels/cpu/samplers.h"

namespace cypris {
namespace {

using cpu_sampling::RowBuffers;
using cpu_sampling::RowLogits;

// Row r's processed and truncated logits, then its token (-1 when every token is masked: the caller
// falls back to the raw argmax). probs_out (optional): the distribution drawn from.
int32_t sample_row(const SamplingBatch& b, int32_t r, RowBuffers& buf, std::vector<float>* probs_out) {
  const SamplingRowParams& p = b.params[r];
  const int32_t V = b.vocab;
  float* x = buf.logits.data();
  std::memcpy(x, b.logits + static_cast<int64_t>(r) * b.ld, sizeof(float) * static_cast<size_t>(V));
  RowLogits row(x, V, buf);
  if (b.bias_offsets) {
    for (int32_t j = b.bias_offsets[r]; j < b.bias_offsets[r + 1]; ++j) {
      cpu_sampling::apply_logit_bias(row, b.bias_ids[j], b.bias_values[j]);
    }
  }
  if (b.hist_offsets) {
    const std::span<const int32_t> hist(b.hist_ids + b.hist_offsets[r],
                                        static_cast<size_t>(b.hist_offsets[r + 1] - b.hist_offsets[r]));
    const size_t num_prompt = std::min(hist.size(), static_cast<size_t>(std::max(0, p.num_prompt_ids)));
    cpu_sampling::apply_penalties(row, p.repetition_penalty, p.frequency_penalty, p.presence_penalty,
                                  hist.first(num_prompt), hist.subspan(num_prompt));
  }
  if (p.temperature == 0.0f) {
    const int32_t token = row.argmax();
    if (probs_out) {
      probs_out->assign(static_cast<size_t>(V), 0.0f);
      if (token >= 0) (*probs_out)[token] = 1.0f;
    }
    return token;
  }
  cpu_sampling::apply_temperature(row, p.temperature);
  cpu_sampling::apply_top_k_top_p(row, p.top_k, p.top_p);
  cpu_sampling::apply_min_p(row, p.min_p);
  const int32_t token = cpu_sampling::draw(row, 0.0f, philox_uniform(p.seed, p.position), probs_out);
  if (token < 0 && probs_out) probs_out->assign(static_cast<size_t>(V), 0.0f);
  return token;
}

void logprobs_row(const SamplingBatch& b, int32_t r, const SamplingResults& out) {
  const SamplingRowParams& p = b.params[r];
  const float* raw = b.logits + static_cast<int64_t>(r) * b.ld;
  const int32_t tok = out.tokens[r];
  const cpu_sampling::RawStats st = cpu_sampling::raw_stats(raw, b.vocab);
  out.logprobs[r] = cpu_sampling::logprob_of(raw, st, tok);
  out.ranks[r] = p.want_rank ? cpu_sampling::rank_of(raw, b.vocab, tok) : 0;
  if (b.max_top <= 0) return;
  const auto top = cpu_sampling::top_logprobs(raw, b.vocab, st, std::clamp(p.num_top_logprobs, 0, b.max_top));
  for (int32_t k = 0; k < b.max_top; ++k) {
    const size_t o = static_cast<size_t>(r) * b.max_top + k;
    const bool have = static_cast<size_t>(k) < top.size();
    out.top_ids[o] = have ? top[k].first : -1;
    out.top_logprobs[o] = have ? top[k].second : 0.0f;
  }
}

}  // namespace

void sample_rows_cpu(const SamplingBatch& b, const SamplingResults& out) {
  CYPRIS_CHECK(b.rows >= 0 && b.vocab > 0 && b.ld >= b.vocab && b.max_top >= 0,
               "sample_rows_cpu: rows {} vocab {} ld {} max_top {}", b.rows, b.vocab, b.ld, b.max_top);
  RowBuffers buf = cpu_sampling::make_buffers(b.vocab);
  for (int32_t r = 0; r < b.rows; ++r) {
    const int32_t token = sample_row(b, r, buf, nullptr);
    // Every token masked: the model's own choice.
    out.tokens[r] = token >= 0 ? token : cpu_sampling::raw_argmax(b.logits + static_cast<int64_t>(r) * b.ld, b.vocab);
    logprobs_row(b, r, out);
  }
}

std::vector<double> sampling_probs_cpu(const SamplingBatch& b, int32_t row) {
  CYPRIS_CHECK(row >= 0 && row < b.rows && b.vocab > 0, "sampling_probs_cpu: row {} of {}", row, b.rows);
  RowBuffers buf = cpu_sampling::make_buffers(b.vocab);
  std::vector<float> probs;
  sample_row(b, row, buf, &probs);
  return std::vector<double>(probs.begin(), probs.end());
}

}  // namespace cypris
