// The CPU's one implementation of each sampler (samplers.h), one function each: RowLogits, the
// logits processors with plain parameters, the truncation samplers, the draw and the raw logprobs.
// Semantics follow Aphrodite Engine 0.6 unless a comment says otherwise.
#include "kernels/cpu/samplers.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "kernels/cpu/sampling_simd.h"

namespace cypris::cpu_sampling {
namespace {

// Rows with at most this share of the vocabulary live switch to the sparse representation.
constexpr size_t kSparseDivisor = 16;

bool desc_by_value(const float* x, int32_t a, int32_t b) {
  return x[a] > x[b] || (x[a] == x[b] && a < b);
}

}  // namespace

RowBuffers make_buffers(int32_t vocab) {
  RowBuffers b;
  b.logits.resize(static_cast<size_t>(vocab));
  b.counts.assign(static_cast<size_t>(vocab), 0);
  b.seen.assign(static_cast<size_t>(vocab), 0);
  return b;
}

// ------------------------------------------------------------------------------------------------
// RowLogits

bool RowLogits::is_live(int32_t id) const {
  if (id < 0 || id >= vocab_) return false;
  if (!sparse_) return x_[id] != kNegInf;
  return std::find(buf_.live.begin(), buf_.live.end(), id) != buf_.live.end();
}

size_t RowLogits::live_count() const {
  if (sparse_) return buf_.live.size();
  size_t n = 0;
  for (int32_t i = 0; i < vocab_; ++i) n += x_[i] != kNegInf;
  return n;
}

void RowLogits::mask_one(int32_t id) {
  if (id < 0 || id >= vocab_) return;
  if (!sparse_) {
    x_[id] = kNegInf;
    return;
  }
  auto it = std::find(buf_.live.begin(), buf_.live.end(), id);
  if (it != buf_.live.end()) buf_.live.erase(it);
}

void RowLogits::keep_only(std::vector<int32_t>&& ids, bool sorted_desc) {
  buf_.live.swap(ids);
  sparse_ = true;
  sorted_ = sorted_desc;
}

void RowLogits::sort_desc() {
  if (!sparse_) {
    buf_.live.clear();
    for (int32_t i = 0; i < vocab_; ++i) {
      if (x_[i] != kNegInf) buf_.live.push_back(i);
    }
    sparse_ = true;
    sorted_ = false;
  }
  if (!sorted_) {
    const float* x = x_;
    std::sort(buf_.live.begin(), buf_.live.end(), [x](int32_t a, int32_t b) { return desc_by_value(x, a, b); });
    sorted_ = true;
  }
}

void RowLogits::stats(float& max_v, double& sum_exp) const {
  if (!sparse_) {
    max_v = max_of(x_, vocab_);
    sum_exp = max_v == kNegInf ? 0.0 : cpu_sampling::sum_exp(x_, vocab_, max_v);
    return;
  }
  max_v = kNegInf;
  for (int32_t id : buf_.live) max_v = std::max(max_v, x_[id]);
  sum_exp = 0.0;
  if (max_v == kNegInf) return;
  for (int32_t id : buf_.live) sum_exp += std::exp(x_[id] - max_v);
}

int32_t RowLogits::argmax() const {
  int32_t best = -1;
  float best_v = kNegInf;
  for_each_live([&](int32_t id, float v) {
    if (best < 0 || v > best_v || (v == best_v && id < best)) {
      best = id;
      best_v = v;
    }
  });
  return best;
}

void RowLogits::densify() {
  if (!sparse_) return;
  auto& vals = buf_.tmp_vals;
  vals.clear();
  for (int32_t id : buf_.live) vals.push_back(x_[id]);
  std::fill(x_, x_ + vocab_, kNegInf);
  for (size_t i = 0; i < buf_.live.size(); ++i) x_[buf_.live[i]] = vals[i];
  sparse_ = false;
  sorted_ = false;
}

void RowLogits::maybe_go_sparse(size_t survivors) {
  if (sparse_ || survivors * kSparseDivisor > static_cast<size_t>(vocab_)) return;
  buf_.live.clear();
  for (int32_t i = 0; i < vocab_; ++i) {
    if (x_[i] != kNegInf) buf_.live.push_back(i);
  }
  sparse_ = true;
  sorted_ = false;
}

// ------------------------------------------------------------------------------------------------
// logit_bias and the penalties

void apply_logit_bias(RowLogits& row, int32_t id, float bias) {
  if (row.is_live(id)) row.add(id, bias);
}

// Repetition over prompt + output; frequency and presence over the output (vLLM).
void apply_penalties(RowLogits& row, float rep, float freq, float pres, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids) {
  if (rep == 1.0f && freq == 0.0f && pres == 0.0f) return;
  RowBuffers& b = row.buffers();
  const int32_t V = row.vocab();
  auto& touched = b.tmp_ids;
  touched.clear();
  for (int32_t t : prompt_ids) {
    if (t < 0 || t >= V || b.seen[t]) continue;
    b.seen[t] = 1;
    touched.push_back(t);
  }
  for (int32_t t : output_ids) {
    if (t < 0 || t >= V) continue;
    ++b.counts[t];
    if (!b.seen[t]) {
      b.seen[t] = 1;
      touched.push_back(t);
    }
  }
  float* x = row.data();
  auto penalise = [&](int32_t t) {
    float v = x[t];
    if (rep != 1.0f) v = v > 0.0f ? v / rep : v * rep;
    const int32_t c = b.counts[t];
    v -= freq * static_cast<float>(c) + (c > 0 ? pres : 0.0f);
    x[t] = v;
  };
  if (row.sparse()) {
    for (int32_t id : row.live()) {
      if (b.seen[id]) penalise(id);
    }
  } else {
    for (int32_t t : touched) {
      if (x[t] != kNegInf) penalise(t);
    }
  }
  for (int32_t t : touched) {
    b.seen[t] = 0;
    b.counts[t] = 0;
  }
}

// ------------------------------------------------------------------------------------------------
// Temperature

void apply_temperature(RowLogits& row, double t) {
  if (t == 1.0 || t <= 0.0) return;
  const float inv = static_cast<float>(1.0 / t);
  float* x = row.data();
  if (row.sparse()) {
    for (int32_t id : row.live()) x[id] *= inv;
  } else {
    for (int32_t i = 0; i < row.vocab(); ++i) x[i] *= inv;  // -inf stays -inf
  }
}

// ------------------------------------------------------------------------------------------------
// Truncation samplers

void apply_top_nsigma(RowLogits& row, float nsigma) {
  if (nsigma <= 0.0f) return;
  double sum = 0.0, sum2 = 0.0, mx = -INFINITY;
  size_t n = 0;
  row.for_each_live([&](int32_t, float v) {
    sum += v;
    sum2 += static_cast<double>(v) * v;
    mx = std::max(mx, static_cast<double>(v));
    ++n;
  });
  if (n < 2) return;
  const double mean = sum / n;
  const double var = std::max(0.0, (sum2 - n * mean * mean) / static_cast<double>(n - 1));  // torch.std (n - 1)
  const double thr = mx - nsigma * std::sqrt(var);
  row.mask_if([thr](int32_t, float v) { return v < thr; });
}

namespace {

// Ids of the dense row's k largest values plus ties with the k-th (sorted descending); empty when
// fewer than k values are finite. Block maxima (vectorised) give a lower bound for the k-th value —
// k blocks have a maximum at least the k-th largest block maximum — so only the blocks that reach it
// are scanned.
std::vector<int32_t> top_k_dense(const float* x, int32_t V, int k, RowBuffers& b) {
  constexpr int32_t kBlock = 64;
  const int32_t nb = V / kBlock;
  std::vector<int32_t> ids;
  auto& bmax = b.tmp_vals;
  bmax.resize(nb);
  block_max64(x, nb, bmax.data());
  float lower = kNegInf;
  if (nb >= k) {
    auto& sel = b.tmp_d;
    sel.assign(bmax.begin(), bmax.end());
    std::nth_element(sel.begin(), sel.begin() + (k - 1), sel.end(), std::greater<double>());
    lower = static_cast<float>(sel[k - 1]);
  }
  std::vector<float> cand;
  auto scan = [&](int32_t from, int32_t to) {
    for (int32_t i = from; i < to; ++i) {
      if (x[i] >= lower && x[i] != kNegInf) cand.push_back(x[i]);
    }
  };
  for (int32_t blk = 0; blk < nb; ++blk) {
    if (bmax[blk] >= lower) scan(blk * kBlock, (blk + 1) * kBlock);
  }
  scan(nb * kBlock, V);
  if (cand.size() < static_cast<size_t>(k)) return ids;
  std::nth_element(cand.begin(), cand.begin() + (k - 1), cand.end(), std::greater<float>());
  const float kth = cand[k - 1];
  auto collect = [&](int32_t from, int32_t to) {
    for (int32_t i = from; i < to; ++i) {
      if (x[i] >= kth) ids.push_back(i);
    }
  };
  for (int32_t blk = 0; blk < nb; ++blk) {
    if (bmax[blk] >= kth) collect(blk * kBlock, (blk + 1) * kBlock);
  }
  collect(nb * kBlock, V);
  std::sort(ids.begin(), ids.end(), [x](int32_t a, int32_t c) { return desc_by_value(x, a, c); });
  return ids;
}

}  // namespace

// Top-k keeps every token whose logit is >= the k-th largest (ties at the boundary survive, as in
// Aphrodite). Top-p then keeps the most likely tokens until the mass strictly ahead of a token
// reaches top_p (the smallest prefix with cumulative probability >= top_p; at least one token).
void apply_top_k_top_p(RowLogits& row, int top_k, float top_p) {
  const float* x = row.data();
  if (top_k > 0 && top_k < row.vocab()) {
    if (row.sparse()) {
      row.sort_desc();
      auto& l = row.live();
      if (l.size() > static_cast<size_t>(top_k)) {
        const float kth = x[l[top_k - 1]];
        size_t cut = top_k;
        while (cut < l.size() && x[l[cut]] >= kth) ++cut;
        l.resize(cut);
      }
    } else {
      std::vector<int32_t> ids = top_k_dense(x, row.vocab(), top_k, row.buffers());
      if (!ids.empty()) row.keep_only(std::move(ids), true);
    }
  }
  if (!(top_p < 1.0f)) return;
  float m;
  double z;
  if (row.sparse()) {
    row.stats(m, z);
    if (z == 0.0) return;
  } else {
    // Bucket the live tokens by their distance below the max. Every token in a bucket before the
    // one where the cumulative mass crosses top_p is kept, every token after it is dropped, and only
    // that one bucket is sorted: O(vocab) instead of sorting the vocabulary.
    constexpr int kBuckets = 1024;
    constexpr float kRange = 64.0f;  // tokens further below the max share the last bucket
    constexpr float kScale = kBuckets / kRange;
    const int32_t V = row.vocab();
    auto& e = row.buffers().tmp_vals;
    e.resize(V);
    m = max_of(x, V);
    if (m == kNegInf) return;
    z = exp_shifted(x, V, m, e.data());
    const double target = static_cast<double>(top_p) * z;
    // Usually a few tokens near the max already hold top_p of the mass: find such a head with cheap
    // vectorised sums, then sort just the head.
    for (float d : {2.0f, 4.0f, 8.0f}) {
      const float t = m - d;
      if (sum_where_ge(x, e.data(), V, t) < target) continue;
      std::vector<int32_t> head;
      for (int32_t i = 0; i < V; ++i) {
        if (x[i] >= t) head.push_back(i);
      }
      if (head.size() > 4096) break;  // a flat head: the buckets below are cheaper than sorting it
      std::sort(head.begin(), head.end(), [x](int32_t a, int32_t b) { return desc_by_value(x, a, b); });
      double ahead = 0.0;
      size_t keep = 0;
      while (keep < head.size() && (keep == 0 || ahead < target)) ahead += e[head[keep++]];
      head.resize(keep);
      row.keep_only(std::move(head), true);
      return;
    }
    std::vector<double> mass(kBuckets + 1, 0.0);
    for (int32_t i = 0; i < V; ++i) {
      const float d = (m - x[i]) * kScale;  // +inf for masked tokens
      mass[d < kBuckets ? static_cast<int>(d) : kBuckets] += e[i];
    }
    double before = 0.0;
    int crossing = kBuckets;
    for (int b = 0; b <= kBuckets; ++b) {
      if (before + mass[b] >= target) {
        crossing = b;
        break;
      }
      before += mass[b];
    }
    std::vector<int32_t> keep, edge;
    for (int32_t i = 0; i < V; ++i) {
      const float v = x[i];
      if (v == kNegInf) continue;
      const float d = (m - v) * kScale;
      const int b = d < kBuckets ? static_cast<int>(d) : kBuckets;
      if (b < crossing) {
        keep.push_back(i);
      } else if (b == crossing) {
        edge.push_back(i);
      }
    }
    std::sort(edge.begin(), edge.end(), [x](int32_t a, int32_t b) { return desc_by_value(x, a, b); });
    double ahead = before;
    for (size_t k = 0; k < edge.size() && (ahead < target || keep.empty()); ++k) {
      keep.push_back(edge[k]);
      ahead += e[edge[k]];
    }
    row.keep_only(std::move(keep), false);
    return;
  }
  row.sort_desc();
  auto& l = row.live();
  double ahead = 0.0;
  const double target = static_cast<double>(top_p) * z;
  size_t keep = 0;
  while (keep < l.size() && (keep == 0 || ahead < target)) {
    ahead += std::exp(x[l[keep]] - m);
    ++keep;
  }
  l.resize(keep);
}

void apply_top_a(RowLogits& row, float top_a) {
  if (top_a <= 0.0f) return;
  float m;
  double z;
  row.stats(m, z);
  // p < top_a * p_max^2 with p = exp(v - m) / z and p_max = 1 / z
  const double thr = top_a / z;
  row.mask_if([&](int32_t, float v) { return std::exp(static_cast<double>(v) - m) < thr; });
}

void apply_min_p(RowLogits& row, float min_p) {
  if (min_p <= 0.0f) return;
  float m = kNegInf;
  if (row.sparse()) {
    row.for_each_live([&](int32_t, float v) { m = std::max(m, v); });
  } else {
    m = max_of(row.data(), row.vocab());
  }
  // p < min_p * p_max  <=>  exp(v - m) < min_p; the log in double, rounded once, as the GPU sampler takes it
  const float thr = m + static_cast<float>(std::log(static_cast<double>(min_p)));
  row.mask_if([thr](int32_t, float v) { return v < thr; });
}

// Tail-free sampling (Aphrodite): sort descending, d2 = |second difference| of the probabilities
// over the whole vocabulary (masked tokens have probability 0), normalise, and cut where the
// cumulative d2 exceeds tfs. The top token always stays; the last token of the vocabulary always goes.
void apply_tfs(RowLogits& row, float tfs) {
  if (!(tfs < 1.0f)) return;
  float m;
  double z;
  row.stats(m, z);
  if (z == 0.0) return;
  row.sort_desc();
  auto& l = row.live();
  const float* x = row.data();
  const size_t n_live = l.size();
  const size_t n = std::min(static_cast<size_t>(row.vocab()), n_live + 2);
  auto& pr = row.buffers().tmp_d;
  pr.assign(n, 0.0);
  for (size_t i = 0; i < n_live; ++i) pr[i] = std::exp(x[l[i]] - m) / z;
  size_t cut = n_live;
  if (n >= 3) {
    std::vector<double> d2(n - 2);
    double total = 0.0;
    for (size_t i = 0; i + 2 < n; ++i) {
      d2[i] = std::abs(pr[i] - 2.0 * pr[i + 1] + pr[i + 2]);
      total += d2[i];
    }
    if (total > 0.0) {
      double cdf = 0.0;
      for (size_t j = 1; j < n_live; ++j) {
        cdf += d2[j - 1] / total;
        if (cdf > tfs) {
          cut = j;
          break;
        }
      }
    }
  }
  if (n_live == n) cut = std::min(cut, n - 1);  // the last of the whole vocabulary is removed
  l.resize(std::max<size_t>(1, cut));
}

namespace {

// sum of p log p over the live tokens (minus their entropy), log p = v - m - log_z.
double negative_entropy(const RowLogits& row, float m, double log_z) {
  double neg_ent = 0.0;
  row.for_each_live([&](int32_t, float v) {
    const double lp = static_cast<double>(v) - m - log_z;
    neg_ent += std::exp(lp) * lp;
  });
  return neg_ent;
}

// Masks every live token but the most likely one whose probability exp(v - m) / z is under eps.
void mask_below_probability(RowLogits& row, float m, double z, double eps) {
  const int32_t top = row.argmax();
  row.mask_if([&](int32_t id, float v) { return id != top && std::exp(static_cast<double>(v) - m) / z < eps; });
}

}  // namespace

void apply_eta_cutoff(RowLogits& row, float eta_cutoff) {
  if (eta_cutoff <= 0.0f) return;
  float m;
  double z;
  row.stats(m, z);
  if (z == 0.0) return;
  const double log_z = std::log(z);
  const double neg_ent = negative_entropy(row, m, log_z);
  const double eta = eta_cutoff * 1e-4;
  const double eps = std::min(eta, std::sqrt(eta) * std::exp(neg_ent));
  mask_below_probability(row, m, z, eps);
}

void apply_epsilon_cutoff(RowLogits& row, float epsilon_cutoff) {
  if (epsilon_cutoff <= 0.0f) return;
  float m;
  double z;
  row.stats(m, z);
  if (z == 0.0) return;
  const double eps = epsilon_cutoff * 1e-4;
  mask_below_probability(row, m, z, eps);
}

// Locally typical sampling: order tokens by |entropy - surprise| and keep the smallest such prefix
// whose probability reaches typical_p (Hugging Face's rule; Aphrodite drops the token that crosses
// typical_p, which can leave less mass than asked for).
void apply_typical(RowLogits& row, float typical_p) {
  if (!(typical_p < 1.0f)) return;
  float m;
  double z;
  row.stats(m, z);
  if (z == 0.0) return;
  const double log_z = std::log(z);
  const double neg_ent = negative_entropy(row, m, log_z);
  std::vector<std::pair<double, int32_t>> dev;
  row.for_each_live([&](int32_t id, float v) {
    const double lp = static_cast<double>(v) - m - log_z;
    dev.emplace_back(std::abs(neg_ent - lp), id);
  });
  std::sort(dev.begin(), dev.end());
  const float* x = row.data();
  std::vector<int32_t> ids;
  double cum = 0.0;
  for (const auto& [d, id] : dev) {
    ids.push_back(id);
    cum += std::exp(static_cast<double>(x[id]) - m) / z;
    if (cum >= typical_p) break;
  }
  row.keep_only(std::move(ids), false);
}

// Quadratic / cubic ("smooth") sampling: v' = max + s*d^3 - k*d^2 with d = v - max,
// k = factor * (3 - curve) / 2, s = factor * (curve - 1) / 2.
void apply_quadratic(RowLogits& row, float smoothing_factor, float smoothing_curve) {
  if (smoothing_factor <= 0.0f) return;
  float m = kNegInf;
  row.for_each_live([&](int32_t, float v) { m = std::max(m, v); });
  const float k = smoothing_factor * (3.0f - smoothing_curve) / 2.0f;
  const float s = smoothing_factor * (smoothing_curve - 1.0f) / 2.0f;
  float* x = row.data();
  auto f = [&](int32_t id) {
    const float d = x[id] - m;
    x[id] = m + s * d * d * d - k * d * d;
  };
  if (row.sparse()) {
    for (int32_t id : row.live()) f(id);
  } else {
    for (int32_t i = 0; i < row.vocab(); ++i) {
      if (x[i] != kNegInf) f(i);
    }
  }
}

// XTC: with probability `probability`, drop every token at or above `threshold` except the least
// likely of them (only when at least two tokens are at or above it).
void apply_xtc(RowLogits& row, float threshold, float probability, double u) {
  if (probability <= 0.0f || u >= probability) return;
  float m;
  double z;
  row.stats(m, z);
  if (z == 0.0) return;
  std::vector<std::pair<float, int32_t>> above;
  row.for_each_live([&](int32_t id, float v) {
    if (std::exp(static_cast<double>(v) - m) / z >= threshold) above.emplace_back(v, id);
  });
  if (above.size() < 2) return;
  std::sort(above.begin(), above.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (size_t i = 0; i + 1 < above.size(); ++i) row.mask_one(above[i].second);
}

void apply_mirostat_mask(RowLogits& row, float mu, float& max_v, double& log_z) {
  double z;
  row.stats(max_v, z);
  log_z = std::log(z);
  const int32_t top = row.argmax();
  const double m = max_v, lz = log_z;
  // surprise = -log2(p) > mu  <=>  log p < -mu * ln 2
  const double thr = -static_cast<double>(mu) * std::log(2.0);
  row.mask_if([&](int32_t id, float v) { return id != top && static_cast<double>(v) - m - lz < thr; });
}

// ------------------------------------------------------------------------------------------------
// The draw

int32_t draw(RowLogits& row, float skew, double u, std::vector<float>* probs_out) {
  float m;
  double z;
  row.stats(m, z);
  if (z == 0.0) return -1;
  auto& ids = row.buffers().tmp_ids;
  auto& pr = row.buffers().tmp_d;
  ids.clear();
  pr.clear();
  row.for_each_live([&](int32_t id, float) { ids.push_back(id); });
  if (row.sparse()) std::sort(ids.begin(), ids.end());  // a sparse live list is in value order
  const float* x = row.data();
  for (int32_t id : ids) pr.push_back(fast_exp(x[id] - m) / z);
  if (skew != 0.0f) {
    // Aphrodite's skew: cumulative probabilities in vocabulary order raised to exp(skew).
    const double e = std::exp(static_cast<double>(skew));
    double cum = 0.0, prev = 0.0;
    std::vector<double> np(pr.size());
    for (size_t k = 0; k < pr.size(); ++k) {
      cum += pr[k];
      const double c = std::pow(std::min(cum, 1.0), e);
      np[k] = std::max(0.0, c - prev);
      prev = c;
    }
    pr.swap(np);
  }
  double total = 0.0;
  for (double q : pr) total += q;
  if (probs_out) {
    probs_out->assign(row.vocab(), 0.0f);
    for (size_t i = 0; i < ids.size(); ++i) (*probs_out)[ids[i]] = static_cast<float>(pr[i] / total);
  }
  if (!(total > 0.0)) return row.argmax();
  const double target = u * total;
  double cum = 0.0;
  int32_t last_nonzero = -1;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (pr[i] <= 0.0) continue;
    cum += pr[i];
    last_nonzero = ids[i];
    if (target < cum) return ids[i];
  }
  return last_nonzero;  // rounding: u * total landed past the last partial sum
}

// ------------------------------------------------------------------------------------------------
// Logprobs of the raw logits

RawStats raw_stats(const float* x, int32_t vocab) {
  const float m = max_of(x, vocab);
  return {m, std::log(sum_exp(x, vocab, m))};
}

float logprob_of(const float* x, const RawStats& st, int32_t token) {
  return static_cast<float>(static_cast<double>(x[token]) - st.max_v - st.log_z);
}

int32_t rank_of(const float* x, int32_t vocab, int32_t token) {
  const float v = x[token];
  int32_t rank = 1;
  for (int32_t i = 0; i < vocab; ++i) rank += x[i] > v;
  return rank;
}

std::vector<std::pair<int32_t, float>> top_logprobs(const float* x, int32_t vocab, const RawStats& st, int num_top) {
  std::vector<std::pair<int32_t, float>> out;
  if (num_top <= 0) return out;
  // Bounded min-heap of (value, -id) so equal values prefer the lower id.
  std::vector<std::pair<float, int32_t>> heap;
  heap.reserve(num_top + 1);
  auto cmp = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  for (int32_t i = 0; i < vocab; ++i) {
    if (heap.size() < static_cast<size_t>(num_top)) {
      heap.emplace_back(x[i], i);
      std::push_heap(heap.begin(), heap.end(), cmp);
    } else if (x[i] > heap.front().first) {
      std::pop_heap(heap.begin(), heap.end(), cmp);
      heap.back() = {x[i], i};
      std::push_heap(heap.begin(), heap.end(), cmp);
    }
  }
  std::sort(heap.begin(), heap.end(), cmp);
  out.reserve(heap.size());
  for (const auto& [val, id] : heap) out.emplace_back(id, logprob_of(x, st, id));
  return out;
}

int32_t raw_argmax(const float* x, int32_t vocab) {
  return argmax_of(x, vocab);
}

}  // namespace cypris::cpu_sampling
