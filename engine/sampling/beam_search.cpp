// Beam search step logic; the selection and stopping rules follow vLLM's
// _process_sequence_group_outputs / _check_beam_search_early_stopping.
#include "engine/sampling/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "engine/common/error.h"

namespace cypris {

BeamSearchConfig BeamSearchConfig::from_params(const SamplingParams& p, int prompt_len, int max_model_len,
                                               std::optional<int32_t> eos_token_id) {
  BeamSearchConfig c;
  c.beam_width = p.effective_best_of();
  c.length_penalty = p.length_penalty;
  c.early_stopping = p.early_stopping;
  c.prompt_len = prompt_len;
  c.max_model_len = max_model_len;
  c.max_tokens = std::max(1, std::min(p.max_tokens.value_or(max_model_len - prompt_len), max_model_len - prompt_len));
  c.eos_token_id = eos_token_id;
  c.ignore_eos = p.ignore_eos;
  c.stop_token_ids = p.stop_token_ids;
  return c;
}

double beam_search_score(double cum_logprob, int seq_len, float length_penalty) {
  return cum_logprob / std::pow(static_cast<double>(std::max(seq_len, 1)), static_cast<double>(length_penalty));
}

BeamSearch::BeamSearch(BeamSearchConfig config) : config_(std::move(config)) {
  CYPRIS_CHECK(config_.beam_width >= 1, "beam search: best_of (the beam width) must be >= 1, got {}",
               config_.beam_width);
  CYPRIS_CHECK(config_.max_tokens >= 1, "beam search: max_tokens must be >= 1, got {}", config_.max_tokens);
  running_.push_back(BeamHypothesis{});
}

bool BeamSearch::is_stop_token(int32_t t) const {
  if (config_.eos_token_id && t == *config_.eos_token_id && !config_.ignore_eos) return true;
  return std::find(config_.stop_token_ids.begin(), config_.stop_token_ids.end(), t) != config_.stop_token_ids.end();
}

double BeamSearch::score(const BeamHypothesis& h) const {
  int len = config_.prompt_len + static_cast<int>(h.tokens.size());
  if (config_.eos_token_id && !h.tokens.empty() && h.tokens.back() == *config_.eos_token_id) --len;
  return beam_search_score(h.cum_logprob, len, config_.length_penalty);
}

bool BeamSearch::should_stop(const BeamHypothesis& best_running, const BeamHypothesis& worst_finished) const {
  if (config_.early_stopping == EarlyStopping::True) return true;
  const double worst = score(worst_finished);
  double best_possible;
  if (config_.early_stopping == EarlyStopping::Never && config_.length_penalty > 0.0f) {
    // Longer is better with a positive length penalty, and the cumulative logprob can only fall:
    // the bound is today's logprob over the longest length this hypothesis can still reach.
    const int max_len = std::min(config_.prompt_len + config_.max_tokens, config_.max_model_len);
    best_possible = beam_search_score(best_running.cum_logprob, max_len, config_.length_penalty);
  } else {
    // false: Hugging Face's heuristic (the best running beam as it is now). "never" with
    // length_penalty <= 0: the score can only fall as the beam grows, so this is exact.
    best_possible = score(best_running);
  }
  return worst >= best_possible;
}

void BeamSearch::step(const float* logprobs, int32_t vocab,
                      const std::function<void(int32_t beam, int32_t token, BeamHypothesis& child)>& extend) {
  CYPRIS_CHECK(!done_, "beam search: step() after the search is done");
  const size_t width = static_cast<size_t>(config_.beam_width);
  const size_t want = 2 * width;
  // The 2 * width best (cum logprob, beam, token); a bounded min-heap over all beams and tokens.
  using Cand = std::tuple<double, int32_t, int32_t>;  // score, beam, token
  auto better = [](const Cand& a, const Cand& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
    if (std::get<1>(a) != std::get<1>(b)) return std::get<1>(a) < std::get<1>(b);
    return std::get<2>(a) < std::get<2>(b);
  };
  std::vector<Cand> heap;
  heap.reserve(want + 1);
  for (size_t b = 0; b < running_.size(); ++b) {
    const float* row = logprobs + b * static_cast<size_t>(vocab);
    for (int32_t t = 0; t < vocab; ++t) {
      if (row[t] == -std::numeric_limits<float>::infinity()) continue;
      Cand c{running_[b].cum_logprob + row[t], static_cast<int32_t>(b), t};
      if (heap.size() < want) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), better);
      } else if (better(c, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), better);
        heap.back() = c;
        std::push_heap(heap.begin(), heap.end(), better);
      }
    }
  }
  std::sort(heap.begin(), heap.end(), better);

  std::vector<BeamHypothesis> new_running;
  std::vector<BeamHypothesis> all_finished = finished_;
  for (const auto& [cum, b, t] : heap) {
    BeamHypothesis h;
    h.tokens = running_[b].tokens;
    h.tokens.push_back(t);
    h.logprobs = running_[b].logprobs;
    if (extend) extend(b, t, h);
    h.cum_logprob = cum;
    h.parent = b;
    const int total = config_.prompt_len + static_cast<int>(h.tokens.size());
    h.finished =
        is_stop_token(t) || static_cast<int>(h.tokens.size()) >= config_.max_tokens || total >= config_.max_model_len;
    (h.finished ? all_finished : new_running).push_back(std::move(h));
  }
  auto by_score = [this](const BeamHypothesis& a, const BeamHypothesis& b) { return score(a) > score(b); };
  std::stable_sort(all_finished.begin(), all_finished.end(), by_score);
  std::stable_sort(new_running.begin(), new_running.end(), by_score);

  bool stop;
  if (new_running.empty()) {
    stop = true;
  } else if (all_finished.size() < width) {
    stop = false;
  } else {
    stop = should_stop(new_running.front(), all_finished[width - 1]);
  }
  if (all_finished.size() > width) all_finished.resize(width);
  finished_ = std::move(all_finished);
  if (stop) {
    running_.clear();
    done_ = true;
  } else {
    if (new_running.size() > width) new_running.resize(width);
    running_ = std::move(new_running);
  }
}

std::vector<BeamHypothesis> BeamSearch::best(int n) const {
  std::vector<BeamHypothesis> out(finished_.begin(), finished_.end());
  if (static_cast<int>(out.size()) < n) {
    std::vector<BeamHypothesis> rest = running_;
    std::stable_sort(rest.begin(), rest.end(),
                     [this](const BeamHypothesis& a, const BeamHypothesis& b) { return score(a) > score(b); });
    for (auto& h : rest) {
      if (static_cast<int>(out.size()) >= n) break;
      out.push_back(h);
    }
  }
  if (static_cast<int>(out.size()) > n) out.resize(n);
  return out;
}

void log_softmax_rows(float* logits, int num_rows, int32_t vocab) {
  for (int r = 0; r < num_rows; ++r) {
    float* x = logits + static_cast<size_t>(r) * vocab;
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < vocab; ++i) m = std::max(m, x[i]);
    double z = 0.0;
    for (int32_t i = 0; i < vocab; ++i) z += std::exp(static_cast<double>(x[i]) - m);
    const double lz = std::log(z) + m;
    for (int32_t i = 0; i < vocab; ++i) x[i] = static_cast<float>(x[i] - lz);
  }
}

}  // namespace cypris
