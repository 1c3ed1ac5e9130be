// The batched sampler: logits [num_rows, vocab] (fp32, row-major) with per-row SamplingParams and
// per-row SamplingState in, one token per row (with logprobs) out. Also prompt logprobs.
//
// Per row: min_tokens (ban EOS/stop ids), custom_token_bans, allowed_token_ids, logit_bias and
// banned-string position bans; then the sampler chain (default order, temperature_last, or
// sampler_priority; Mirostat 2 replaces the chain); then softmax, skew and the draw (argmax when
// temperature == 0). Rows are independent: a row's result depends only on its logits, params and
// state, never on the other rows of the batch. The draws come from the request's Philox stream
// (kernels/common/philox.h: key from the seed and sequence index, counter = output position), the
// same stream the GPU sampler draws from, so on CUDA the engine sends each row that the GPU path
// supports (gpu_sampling.h) to the GPU and the others here, and a seeded row gets the same tokens
// either way (docs/cuda_backend.md, "GPU sampling").
//
// Logprobs are log_softmax of the RAW logits, before any processing (like vLLM's default): they
// describe the model, not the sampler settings, and do not change when a client tweaks top_p.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "engine/request/outputs.h"  // TokenLogprob
#include "engine/request/sampling_params.h"
#include "kernels/common/philox.h"

namespace cypris {

struct SampleOutput {
  int32_t token = -1;
  float logprob = 0.0f;                    // of `token` under log_softmax(raw logits)
  int32_t rank = 0;                        // 1 = most likely under the raw logits; 0 when params.logprobs is unset
  std::vector<TokenLogprob> top_logprobs;  // most likely first; min(params.logprobs, max_log_probs) entries
};

// Per-sequence sampling state: token history (prompt + output), the request's Philox stream key
// and Mirostat's mu.
class SamplingState {
 public:
  SamplingState() = default;
  // seq_index tells the request's n/best_of sequences apart: each gets its own stream derived
  // from the seed, so the same seed gives the same tokens whatever else is in the batch.
  SamplingState(const SamplingParams& params, std::vector<int32_t> prompt_ids, uint32_t seq_index = 0);
  // The same with the seed given: the request's own, or the one the engine drew for a request
  // without a seed (--seed makes those draws reproducible).
  SamplingState(const SamplingParams& params, std::vector<int32_t> prompt_ids, uint32_t seq_index, uint64_t seed);

  const std::vector<int32_t>& prompt_ids() const { return prompt_ids_; }
  const std::vector<int32_t>& output_ids() const { return output_ids_; }
  size_t num_tokens() const { return prompt_ids_.size() + output_ids_.size(); }
  int32_t token_at(size_t i) const {
    return i < prompt_ids_.size() ? prompt_ids_[i] : output_ids_[i - prompt_ids_.size()];
  }

  void append(int32_t token) { output_ids_.push_back(token); }
  // Drops the last num_tokens output tokens (banned strings). Bans recorded for positions past the
  // new end are forgotten; bans at the new end stay.
  void rewind(size_t num_tokens);
  // Bans `token` at the next output position (after a banned-string rewind); the ban holds until
  // generation moves past that position, and accumulates over repeated rewinds to it.
  void ban_at_next_position(int32_t token);
  std::span<const int32_t> next_position_bans() const;

  // The uniform in [0, 1) of the output position being sampled (the next one), from the request's
  // Philox stream. lane 0: the token's draw; lane 1: XTC's coin. A rewound position draws the same
  // uniform again (its banned token is masked by then).
  double uniform(int lane = 0) const { return philox_uniform(stream_key_, output_ids_.size(), lane); }
  // Key of the request's counter-based (Philox) stream: derived from the seed and seq_index, fixed
  // for the request's life (the counter is the output position). The GPU sampler gets it as is.
  uint64_t stream_key() const { return stream_key_; }
  float mirostat_mu() const { return mirostat_mu_; }
  void set_mirostat_mu(float mu) { mirostat_mu_ = mu; }

 private:
  std::vector<int32_t> prompt_ids_;
  std::vector<int32_t> output_ids_;
  std::map<size_t, std::vector<int32_t>> position_bans_;  // output position -> banned tokens
  uint64_t stream_key_ = 0;
  float mirostat_mu_ = 0.0f;
};

struct SamplerConfig {
  int32_t vocab_size = 0;
  int max_log_probs = 10;               // --max-log-probs: cap on top-N logprobs
  std::optional<int32_t> eos_token_id;  // banned during min_tokens unless ignore_eos
  int num_threads = 1;                  // rows are spread over this many threads
};

struct SamplerRow {
  const SamplingParams* params;
  SamplingState* state;
  // Optional [ceil(vocab / 32)] bitmask from guided decoding: a token whose bit (word id / 32, bit
  // id % 32) is 0 is masked before the chain, like allowed_token_ids.
  const uint32_t* allowed_mask = nullptr;
};

// The features a row uses: its request's (SamplingParams::active_samplers) and its state's
// (min_tokens still pending, banned-string position bans, a guided-decoding mask). The one list the
// sampler's fast path and the GPU path (gpu_sampling.h) choose from; a new logits processor (e.g. a
// grammar mask) adds its feature here.
SamplerSet active_samplers(const SamplerRow& row);

// Rows using only these (in the default order) go straight to the draw: top-k by partial selection
// on the raw logits, temperature and top-p on the survivors.
inline constexpr SamplerSet kPlainSamplers{SamplerFeature::Temperature, SamplerFeature::TopP, SamplerFeature::TopK,
                                           SamplerFeature::Order};

class Sampler {
 public:
  explicit Sampler(SamplerConfig config);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  const SamplerConfig& config() const { return config_; }

  // logits: [rows.size(), vocab_size], row-major, not modified. Each row's sampled token is appended to
  // its state (and its Mirostat mu advances). Rows are spread over config.num_threads threads;
  // one caller at a time (the engine thread): the per-thread buffers belong to this Sampler.
  std::vector<SampleOutput> sample(const float* logits, std::span<const SamplerRow> rows);

  // The logits of one row after the pre-chain masks and the sampler chain (masked tokens are -inf),
  // before softmax, skew and the draw (XTC's coin is the one sample() would toss).
  // For tests and debugging. With Mirostat 2 this is the Mirostat mask (the chain is skipped).
  std::vector<float> process(std::span<const float> logits, const SamplingParams& params, SamplingState& state,
                             const uint32_t* allowed_mask = nullptr);

  // Beam search: log_softmax of one row after the pre-chain masks (min_tokens, bans, allowed ids,
  // logit_bias, banned positions) and the repetition/presence/frequency penalties. Temperature and
  // the truncation samplers do not apply: beam search ranks continuations by the model's own
  // probabilities (vLLM requires temperature 0 with beam search; we ignore the samplers instead of
  // refusing the request). Masked tokens are -inf. out: vocab_size floats.
  void beam_logprobs(std::span<const float> logits, const SamplingParams& params, const SamplingState& state,
                     std::span<float> out);

  // Final sampling probabilities of one row (after skew), as sample() draws from them (speculative
  // decoding's verification by the general rules; tests). allowed_mask: the row's grammar mask.
  std::vector<float> probabilities(std::span<const float> logits, const SamplingParams& params, SamplingState& state,
                                   const uint32_t* allowed_mask = nullptr);

  // Mirostat 2: the mu after `token` is emitted at this row (what sample() leaves in the state when
  // it draws that token). Speculative decoding verifies a drafted position with the mu it would
  // have had, i.e. after the drafts before it. state.mirostat_mu() without Mirostat or at
  // temperature 0, or when the token is masked at this row (it cannot be emitted there).
  float mirostat_mu_after(std::span<const float> logits, const SamplingParams& params, const SamplingState& state,
                          int32_t token, const uint32_t* allowed_mask = nullptr);

 private:
  struct Scratch;
  SamplerConfig config_;
  std::vector<Scratch*> scratch_;  // one per thread
};

// Logprob of `token`, its rank and the num_top most likely tokens under log_softmax(logits).
SampleOutput token_logprobs(std::span<const float> logits, int32_t token, int num_top);

// Prompt logprobs: logits [num_positions, vocab] where row i predicts prompt token next_tokens[i]
// (i.e. next_tokens = prompt[1..]). num_top is capped by the caller (min(prompt_logprobs, max_log_probs)).
std::vector<SampleOutput> prompt_logprobs(const float* logits, int32_t vocab_size, std::span<const int32_t> next_tokens,
                                          int num_top);

}  // namespace cypris
