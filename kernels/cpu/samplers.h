// The CPU's one implementation of each sampler: one row's working logits (RowLogits) and every logits
// processor, truncation sampler, the draw and the raw logprobs as a function on it, with plain
// parameters. Two drivers run them: the engine's sampler chain (engine/sampling/sampler.h: which
// samplers a request uses, their order, its state) and the Backend's sampling op on the CPU
// (sample_rows_cpu, kernels/cpu/sampling.h), which is also the reference of the GPU sampler
// (kernels/cuda/sampling.cu). Semantics follow Aphrodite Engine 0.6 unless a comment says otherwise.
//
// A row starts dense (all vocab entries, -inf = masked) and turns sparse (an explicit list of live
// token ids) once a truncation leaves few tokens, so later steps cost O(live tokens) instead of
// O(vocab).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace cypris::cpu_sampling {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Per-thread buffers reused across rows. counts and seen must be [vocab] and all zero (make_buffers).
struct RowBuffers {
  std::vector<float> logits;  // [vocab] working copy
  std::vector<int32_t> live;  // live ids when sparse
  std::vector<int32_t> tmp_ids;
  std::vector<float> tmp_vals;
  std::vector<double> tmp_d;
  std::vector<int32_t> counts;  // [vocab] output-token counts, kept all-zero between rows
  std::vector<uint8_t> seen;    // [vocab] token seen in prompt or output, kept all-zero
  std::vector<int32_t> hist;    // prompt + output ids
};

// Buffers for rows of `vocab` tokens.
RowBuffers make_buffers(int32_t vocab);

class RowLogits {
 public:
  RowLogits(float* x, int32_t vocab, RowBuffers& buf) : x_(x), vocab_(vocab), buf_(buf) {}

  float* data() { return x_; }
  int32_t vocab() const { return vocab_; }
  bool sparse() const { return sparse_; }
  bool sorted() const { return sparse_ && sorted_; }
  std::vector<int32_t>& live() { return buf_.live; }
  RowBuffers& buffers() { return buf_; }

  template <class F>
  void for_each_live(F&& f) const {
    if (sparse_) {
      for (int32_t id : buf_.live) f(id, x_[id]);
    } else {
      for (int32_t i = 0; i < vocab_; ++i) {
        if (x_[i] != kNegInf) f(i, x_[i]);
      }
    }
  }
  bool is_live(int32_t id) const;  // O(live) when sparse
  size_t live_count() const;
  void add(int32_t id, float delta) { x_[id] += delta; }  // masked entries stay -inf
  // Removes every live token for which pred(id, value) holds.
  template <class P>
  void mask_if(P&& pred);
  void mask_one(int32_t id);
  // Keeps exactly `ids` (each must be live); they become the live list, sorted descending if told.
  void keep_only(std::vector<int32_t>&& ids, bool sorted_desc);
  // Sorts the live list by value, descending (ties: lower id first); makes the row sparse.
  void sort_desc();
  // max value and sum(exp(x - max)) over the live tokens; {-inf, 0} when none are live.
  void stats(float& max_v, double& sum_exp) const;
  int32_t argmax() const;  // lowest id among the maxima; -1 when none are live
  // Writes -inf over non-live entries so the array alone describes the row.
  void densify();

 private:
  void maybe_go_sparse(size_t survivors);

  float* x_;
  int32_t vocab_;
  RowBuffers& buf_;
  bool sparse_ = false;
  bool sorted_ = false;
};

template <class P>
void RowLogits::mask_if(P&& pred) {
  if (sparse_) {
    auto& l = buf_.live;
    size_t w = 0;
    for (size_t r = 0; r < l.size(); ++r) {
      if (!pred(l[r], x_[l[r]])) l[w++] = l[r];
    }
    l.resize(w);
    return;
  }
  size_t survivors = 0;
  for (int32_t i = 0; i < vocab_; ++i) {
    if (x_[i] == kNegInf) continue;
    if (pred(i, x_[i])) {
      x_[i] = kNegInf;
    } else {
      ++survivors;
    }
  }
  maybe_go_sparse(survivors);
}

// --- the samplers; each is a no-op when its parameter is off ---
// logit_bias of one token (a masked token stays masked; ids outside the vocabulary are ignored).
void apply_logit_bias(RowLogits& row, int32_t id, float bias);
// Repetition over prompt + output; frequency and presence over the output (vLLM). Ids outside the
// vocabulary are ignored.
void apply_penalties(RowLogits& row, float repetition, float frequency, float presence,
                     std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids);
// Divides by t (t == 1 or t <= 0: nothing; the caller takes the argmax for t == 0).
void apply_temperature(RowLogits& row, double t);
void apply_top_nsigma(RowLogits& row, float nsigma);
void apply_top_k_top_p(RowLogits& row, int top_k, float top_p);
void apply_top_a(RowLogits& row, float top_a);
void apply_min_p(RowLogits& row, float min_p);
void apply_tfs(RowLogits& row, float tfs);
void apply_eta_cutoff(RowLogits& row, float eta_cutoff);
void apply_epsilon_cutoff(RowLogits& row, float epsilon_cutoff);
void apply_typical(RowLogits& row, float typical_p);
void apply_quadratic(RowLogits& row, float smoothing_factor, float smoothing_curve);
// u: the row's uniform draw for this step (XTC applies when u < probability).
void apply_xtc(RowLogits& row, float threshold, float probability, double u);
// Mirostat 2: masks tokens whose surprise (-log2 p) exceeds mu, keeping the argmax. Returns the
// max and log-sum-exp of the logits before masking, from which the caller computes the surprise of
// the token it draws (to update mu).
void apply_mirostat_mask(RowLogits& row, float mu, float& max_v, double& log_z);

// The draw from the live tokens after softmax and Aphrodite's skew (0: none): the inverse CDF at u in
// vocabulary order, as the GPU sampler draws, so the same logits and uniform give the same token on
// either device. -1 when nothing is live. probs_out (optional): the [vocab] probabilities drawn from.
int32_t draw(RowLogits& row, float skew, double u, std::vector<float>* probs_out);

// Logprobs of the RAW logits (log_softmax before any processing).
struct RawStats {
  float max_v;
  double log_z;  // log sum exp(x - max)
};
RawStats raw_stats(const float* x, int32_t vocab);
float logprob_of(const float* x, const RawStats& st, int32_t token);
// 1 + the number of tokens with a larger logit.
int32_t rank_of(const float* x, int32_t vocab, int32_t token);
// The min(num_top, vocab) most likely tokens with their logprobs, most likely first (ties: lower id).
std::vector<std::pair<int32_t, float>> top_logprobs(const float* x, int32_t vocab, const RawStats& st, int num_top);
// Index of the first maximum of the raw logits (0 when all are NaN): the token of a row whose every
// token is masked, the model's own choice.
int32_t raw_argmax(const float* x, int32_t vocab);

}  // namespace cypris::cpu_sampling
