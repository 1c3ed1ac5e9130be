// CPU reference of the GPU sampler (kernels/cuda/sampling.cu): the same steps in the same order,
// written plainly (a full sort where the kernel does a radix search) so the two can be compared.
#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/common/error.h"

namespace cypris {
namespace {

constexpr int32_t kPromptFlag = 1 << 30;

bool live(float v) {
  return v > -INFINITY;  // false for -inf (masked) and NaN
}

int32_t argmax_where(const float* x, int32_t V, bool (*ok)(float)) {
  int32_t best = -1;
  for (int32_t i = 0; i < V; ++i) {
    if (ok(x[i]) && (best < 0 || x[i] > x[best])) best = i;
  }
  return best;
}

bool not_nan(float v) {
  return !std::isnan(v);
}

void apply_penalties(const SamplingBatch& b, const SamplingRowParams& p, int32_t r, std::vector<float>& x) {
  if (p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
  if (!b.hist_offsets) return;
  const int32_t V = b.vocab;
  std::vector<int32_t> cnt(static_cast<size_t>(V), 0);
  const int32_t begin = b.hist_offsets[r], end = b.hist_offsets[r + 1];
  for (int32_t j = begin; j < end; ++j) {
    const int32_t t = b.hist_ids[j];
    if (t < 0 || t >= V) continue;
    if (j - begin < p.num_prompt_ids) {
      cnt[t] |= kPromptFlag;
    } else {
      cnt[t] += 1;
    }
  }
  for (int32_t j = begin; j < end; ++j) {
    const int32_t t = b.hist_ids[j];
    if (t < 0 || t >= V || cnt[t] == 0) continue;
    const int32_t c = cnt[t] & (kPromptFlag - 1);
    cnt[t] = 0;
    float v = x[t];
    if (v == -INFINITY) continue;
    if (p.repetition_penalty != 1.0f) v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
    v -= p.frequency_penalty * static_cast<float>(c) + (c > 0 ? p.presence_penalty : 0.0f);
    x[t] = v;
  }
}

// The processed logits of row r (bias, penalties, temperature).
std::vector<float> process(const SamplingBatch& b, const SamplingRowParams& p, int32_t r) {
  const int32_t V = b.vocab;
  const float* raw = b.logits + static_cast<int64_t>(r) * b.ld;
  std::vector<float> x(raw, raw + V);
  if (b.bias_offsets) {
    for (int32_t j = b.bias_offsets[r]; j < b.bias_offsets[r + 1]; ++j) {
      const int32_t id = b.bias_ids[j];
      if (id >= 0 && id < V) x[id] += b.bias_values[j];
    }
  }
  apply_penalties(b, p, r, x);
  const float t = p.temperature;
  if (t != 1.0f && t > 0.0f) {
    const float inv = static_cast<float>(1.0 / static_cast<double>(t));
    for (float& v : x) v *= inv;
  }
  return x;
}

// Unnormalised probability exp(x - max) of every token the draw can pick (0 for the others), after
// top-k, top-p and min-p; empty when nothing is live. `top` gets the processed argmax (-1: none).
std::vector<double> draw_weights(const std::vector<float>& x, const SamplingRowParams& p, int32_t& top) {
  const int32_t V = static_cast<int32_t>(x.size());
  top = argmax_where(x.data(), V, live);
  if (top < 0) return {};
  const float m = x[top];
  // top-k: everything >= the k-th largest live value (ties at the boundary stay)
  float lo = -INFINITY;
  if (p.top_k > 0 && p.top_k < V) {
    std::vector<float> vals;
    for (float v : x) {
      if (live(v)) vals.push_back(v);
    }
    if (static_cast<int32_t>(vals.size()) >= p.top_k) {
      std::nth_element(vals.begin(), vals.begin() + (p.top_k - 1), vals.end(), std::greater<float>());
      lo = vals[static_cast<size_t>(p.top_k - 1)];
    }
  }
  auto live1 = [&](int32_t i) { return live(x[i]) && x[i] >= lo; };
  auto e_of = [&](float v) { return std::exp(static_cast<double>(v - m)); };
  // top-p: the value tau of the token where the sorted cumulative mass reaches top_p, and how many
  // tokens equal to tau stay
  const bool top_p_on = p.top_p < 1.0f;
  float tau = -INFINITY;
  int32_t ties_keep = 0;
  std::vector<int32_t> tie_rank(static_cast<size_t>(V), 0);
  if (top_p_on) {
    double z = 0.0;
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < V; ++i) {
      if (!live1(i)) continue;
      z += e_of(x[i]);
      ids.push_back(i);
    }
    const double target = static_cast<double>(p.top_p) * z;
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t c) { return x[a] > x[c] || (x[a] == x[c] && a < c); });
    double cum = 0.0;
    tau = x[ids.back()];
    for (int32_t id : ids) {
      cum += e_of(x[id]);
      if (cum >= target) {
        tau = x[id];
        break;
      }
    }
    double above = 0.0;
    int32_t above_count = 0, ties = 0;
    for (int32_t i = 0; i < V; ++i) {
      if (!live1(i)) continue;
      if (x[i] > tau) {
        above += e_of(x[i]);
        ++above_count;
      } else if (x[i] == tau) {
        tie_rank[i] = ties++;
      }
    }
    ties_keep = top_p_ties_to_keep(above, above_count, e_of(tau), ties, target);
  }
  const float thr = p.min_p > 0.0f ? m + static_cast<float>(std::log(static_cast<double>(p.min_p))) : -INFINITY;
  std::vector<double> w(static_cast<size_t>(V), 0.0);
  for (int32_t i = 0; i < V; ++i) {
    if (!live1(i) || x[i] < thr) continue;
    if (top_p_on && (x[i] < tau || (x[i] == tau && tie_rank[i] >= ties_keep))) continue;
    w[i] = e_of(x[i]);
  }
  return w;
}

int32_t sample_row(const SamplingBatch& b, const SamplingRowParams& p, int32_t r) {
  const int32_t V = b.vocab;
  const float* raw = b.logits + static_cast<int64_t>(r) * b.ld;
  const std::vector<float> x = process(b, p, r);
  const int32_t fallback = std::max(0, argmax_where(raw, V, not_nan));
  if (p.temperature == 0.0f) {
    const int32_t t = argmax_where(x.data(), V, live);
    return t >= 0 ? t : fallback;
  }
  int32_t top;
  const std::vector<double> w = draw_weights(x, p, top);
  if (top < 0) return fallback;
  double total = 0.0;
  for (double e : w) total += e;
  // The inverse CDF in vocabulary order at u.
  const double target = philox_uniform(p.seed, p.position) * total;
  double cum = 0.0;
  int32_t last = top;
  for (int32_t i = 0; i < V; ++i) {
    if (w[i] <= 0.0) continue;
    cum += w[i];
    last = i;
    if (target < cum) return i;
  }
  return last;  // rounding: target landed past the last partial sum
}

void logprobs_row(const SamplingBatch& b, const SamplingRowParams& p, int32_t r, const SamplingResults& out) {
  const int32_t V = b.vocab;
  const float* raw = b.logits + static_cast<int64_t>(r) * b.ld;
  const int32_t tok = out.tokens[r];
  const int32_t top = argmax_where(raw, V, not_nan);
  const float m = top >= 0 ? raw[top] : 0.0f;
  double z = 0.0;
  for (int32_t i = 0; i < V; ++i) {
    if (!std::isnan(raw[i])) z += std::exp(static_cast<double>(raw[i] - m));
  }
  const double log_z = std::log(z);
  auto lp = [&](int32_t id) { return static_cast<float>(static_cast<double>(raw[id]) - m - log_z); };
  out.logprobs[r] = lp(tok);
  int32_t rank = 0;
  if (p.want_rank) {
    rank = 1;
    for (int32_t i = 0; i < V; ++i) rank += raw[i] > raw[tok];
  }
  out.ranks[r] = rank;
  if (b.max_top <= 0) return;
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < V; ++i) {
    if (!std::isnan(raw[i])) ids.push_back(i);
  }
  const size_t n =
      std::min({ids.size(), static_cast<size_t>(std::max(0, p.num_top_logprobs)), static_cast<size_t>(b.max_top)});
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int32_t a, int32_t c) { return raw[a] > raw[c] || (raw[a] == raw[c] && a < c); });
  for (int32_t k = 0; k < b.max_top; ++k) {
    const size_t o = static_cast<size_t>(r) * b.max_top + k;
    out.top_ids[o] = static_cast<size_t>(k) < n ? ids[k] : -1;
    out.top_logprobs[o] = static_cast<size_t>(k) < n ? lp(ids[k]) : 0.0f;
  }
}

}  // namespace

void sample_rows_cpu(const SamplingBatch& b, const SamplingResults& out) {
  CYPRIS_CHECK(b.rows >= 0 && b.vocab > 0 && b.ld >= b.vocab && b.max_top >= 0,
               "sample_rows_cpu: rows {} vocab {} ld {} max_top {}", b.rows, b.vocab, b.ld, b.max_top);
  for (int32_t r = 0; r < b.rows; ++r) {
    out.tokens[r] = sample_row(b, b.params[r], r);
    logprobs_row(b, b.params[r], r, out);
  }
}

std::vector<double> sampling_probs_cpu(const SamplingBatch& b, int32_t row) {
  CYPRIS_CHECK(row >= 0 && row < b.rows && b.vocab > 0, "sampling_probs_cpu: row {} of {}", row, b.rows);
  const SamplingRowParams& p = b.params[row];
  const std::vector<float> x = process(b, p, row);
  std::vector<double> probs(static_cast<size_t>(b.vocab), 0.0);
  int32_t top = argmax_where(x.data(), b.vocab, live);
  if (p.temperature == 0.0f || top < 0) {
    if (top >= 0) probs[top] = 1.0;
    return probs;
  }
  probs = draw_weights(x, p, top);
  double total = 0.0;
  for (double e : probs) total += e;
  for (double& e : probs) e /= total;
  return probs;
}

}  // namespace cypris
