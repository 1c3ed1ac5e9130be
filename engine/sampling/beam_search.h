// Beam search step logic (vLLM / Hugging Face semantics): keeps the running beams and the finished
// hypotheses of one request, picks the next beams from their next-token log-probabilities, and
// decides when to stop (early_stopping true / false / "never"). The engine runs the model on
// running() each step and forks KV caches by each new beam's `parent`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/request/outputs.h"  // PositionLogprobs
#include "engine/request/sampling_params.h"

namespace cypris {

struct BeamHypothesis {
  std::vector<int32_t> tokens;  // output tokens
  double cum_logprob = 0.0;
  bool finished = false;  // ended with EOS / a stop token id, or reached max_tokens
  int32_t parent = -1;    // index into the previous running() list (-1 before the first step)
  std::vector<PositionLogprobs> logprobs;  // per token, filled by step()'s `extend` callback when given
};

struct BeamSearchConfig {
  int beam_width = 2;  // best_of
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::False;
  int prompt_len = 0;
  int max_tokens = 16;          // output tokens per hypothesis
  int max_model_len = 1 << 30;  // total length cap (prompt + output)
  std::optional<int32_t> eos_token_id;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;

  // max_tokens unset in params means up to max_model_len.
  static BeamSearchConfig from_params(const SamplingParams& p, int prompt_len, int max_model_len,
                                      std::optional<int32_t> eos_token_id);
};

// cum_logprob / seq_len^length_penalty, seq_len = prompt + output tokens, not counting a final EOS
// (as Hugging Face does).
double beam_search_score(double cum_logprob, int seq_len, float length_penalty);

class BeamSearch {
 public:
  explicit BeamSearch(BeamSearchConfig config);

  const BeamSearchConfig& config() const { return config_; }
  // The beams the next step needs logits for, in row order. One empty beam before the first step.
  const std::vector<BeamHypothesis>& running() const { return running_; }
  // Finished hypotheses kept so far (at most beam_width), best first.
  const std::vector<BeamHypothesis>& finished() const { return finished_; }
  bool done() const { return done_; }

  // logprobs: [running().size(), vocab] next-token log-probabilities (log_softmax of the processed
  // logits, see log_softmax_rows()). Takes the 2 * beam_width best (beam, token) continuations by
  // cumulative logprob; finished ones join finished(), the best beam_width others continue.
  // extend(beam, token, child), when given, is called for each new hypothesis (running or finished)
  // made from running()[beam] + token, e.g. to append the token's logprobs to child.logprobs.
  void step(const float* logprobs, int32_t vocab,
            const std::function<void(int32_t beam, int32_t token, BeamHypothesis& child)>& extend = {});

  double score(const BeamHypothesis& h) const;
  // The best n results, best first: finished hypotheses, then running ones if too few finished.
  std::vector<BeamHypothesis> best(int n) const;

 private:
  bool is_stop_token(int32_t t) const;
  bool should_stop(const BeamHypothesis& best_running, const BeamHypothesis& worst_finished) const;

  BeamSearchConfig config_;
  std::vector<BeamHypothesis> running_;
  std::vector<BeamHypothesis> finished_;
  bool done_ = false;
};

// In place: row <- log_softmax(row) for each of num_rows rows.
void log_softmax_rows(float* logits, int num_rows, int32_t vocab);

}  // namespace cypris
