// The processors that read a request's parameters and state, and the chain that runs the samplers
// (kernels/cpu/samplers.h) in the request's order (semantics follow Aphrodite Engine 0.6 unless a
// comment says otherwise; see reference/sampler-notes.md).
#include "engine/sampling/sampler_chain.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "engine/sampling/sampler.h"

namespace cypris::sampling_detail {
namespace {

void build_history(const SamplingState& s, std::vector<int32_t>& hist) {
  hist.clear();
  hist.insert(hist.end(), s.prompt_ids().begin(), s.prompt_ids().end());
  hist.insert(hist.end(), s.output_ids().begin(), s.output_ids().end());
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Before the chain

void apply_pre_chain(RowLogits& row, const SamplingParams& p, const SamplingState& s,
                     std::optional<int32_t> eos_token_id, const uint32_t* allowed_mask) {
  if (allowed_mask) {
    row.mask_if([allowed_mask](int32_t id, float) { return ((allowed_mask[id >> 5] >> (id & 31)) & 1u) == 0; });
  }
  // min_tokens: no stop token and no EOS until enough tokens exist (vLLM's all_stop_token_ids:
  // EOS counts unless ignore_eos).
  if (static_cast<int>(s.output_ids().size()) < p.min_tokens) {
    for (int32_t id : p.stop_token_ids) row.mask_one(id);
    if (eos_token_id && !p.ignore_eos) row.mask_one(*eos_token_id);
  }
  for (int32_t id : p.custom_token_bans) row.mask_one(id);
  for (int32_t id : s.next_position_bans()) row.mask_one(id);
  if (p.allowed_token_ids) {
    auto& keep = row.buffers().tmp_ids;
    keep.clear();
    for (int32_t id : *p.allowed_token_ids) {
      if (row.is_live(id)) keep.push_back(id);
    }
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    std::vector<int32_t> ids(keep.begin(), keep.end());
    row.keep_only(std::move(ids), false);
  }
  for (const auto& [id, bias] : p.logit_bias) cpu_sampling::apply_logit_bias(row, id, bias);
}

// ------------------------------------------------------------------------------------------------
// Penalties: repetition over prompt + output; frequency and presence over the output (vLLM).

void apply_penalties(RowLogits& row, const SamplingParams& p, const SamplingState& s) {
  cpu_sampling::apply_penalties(row, p.repetition_penalty, p.frequency_penalty, p.presence_penalty, s.prompt_ids(),
                                s.output_ids());
}

// ------------------------------------------------------------------------------------------------
// DRY (p-e-w, as in Aphrodite 0.6). For each earlier occurrence of the last token, the match is
// extended backwards while it equals the current suffix and meets no breaker; the token that
// followed the occurrence gets len = matched tokens + 1 (the longest over all occurrences). Tokens
// with len >= allowed_length lose multiplier * base^(len - allowed_length). The threshold is the
// original DRY's rule ("repeats up to allowed_length are free"); reading the notes literally would
// also penalise shorter repeats, which defeats dry_allowed_length. Tokens that are breakers are
// never penalised; lengths are capped at dry_max_ngram (100). The 2026 Aphrodite's speed limits are
// request fields here: dry_max_occurrences (only the most recent occurrences are searched) and
// dry_early_exit_match_len (the search stops at a repeat that long); 0 turns either off.

void apply_dry(RowLogits& row, const SamplingParams& p, const SamplingState& s) {
  if (p.dry_multiplier == 0.0f) return;
  const int kMaxNgram = std::max(1, p.dry_max_ngram);
  RowBuffers& b = row.buffers();
  build_history(s, b.hist);
  const auto& breakers = p.dry_sequence_breaker_ids;
  auto is_breaker = [&](int32_t t) { return std::find(breakers.begin(), breakers.end(), t) != breakers.end(); };
  size_t start = 0;
  if (p.dry_range > 0 && b.hist.size() > static_cast<size_t>(p.dry_range)) start = b.hist.size() - p.dry_range;
  const int32_t* seq = b.hist.data() + start;
  const int n = static_cast<int>(b.hist.size() - start);
  if (n < 2) return;
  const int32_t last = seq[n - 1];
  if (is_breaker(last)) return;
  int max_ngram = 0;  // trailing tokens up to (not including) the nearest breaker
  while (max_ngram < n && max_ngram < kMaxNgram && !is_breaker(seq[n - 1 - max_ngram])) ++max_ngram;
  if (max_ngram < p.dry_allowed_length) return;  // no repeat can reach the allowed length

  const int32_t V = row.vocab();
  auto& lens = b.counts;  // reused as token -> len, reset below
  auto& touched = b.tmp_ids;
  touched.clear();
  int occurrences = 0;
  for (int idx = n - 2; idx >= 0; --idx) {
    if (seq[idx] != last) continue;
    if (p.dry_max_occurrences > 0 && occurrences++ >= p.dry_max_occurrences) break;
    const int32_t next = seq[idx + 1];
    if (next < 0 || next >= V || is_breaker(next)) continue;
    int match = 0;
    const int max_unwind = std::min(idx, max_ngram - 1);
    while (match < max_unwind) {
      const int32_t cand = seq[idx - match - 1];
      if (is_breaker(cand) || cand != seq[n - 2 - match]) break;
      ++match;
    }
    const int len = match + 1;
    if (lens[next] == 0) touched.push_back(next);
    lens[next] = std::max(lens[next], len);
    if (p.dry_early_exit_match_len > 0 && len >= p.dry_early_exit_match_len) break;
  }
  const int allowed = p.dry_allowed_length;
  auto penalty = [&](int len) { return p.dry_multiplier * std::pow(p.dry_base, static_cast<float>(len - allowed)); };
  float* x = row.data();
  if (row.sparse()) {
    for (int32_t id : row.live()) {
      if (lens[id] >= allowed && lens[id] > 0) x[id] -= penalty(lens[id]);
    }
  } else {
    for (int32_t t : touched) {
      if (lens[t] >= allowed && x[t] != kNegInf) x[t] -= penalty(lens[t]);
    }
  }
  for (int32_t t : touched) lens[t] = 0;
}

// ------------------------------------------------------------------------------------------------
// No-repeat n-gram (Hugging Face semantics over prompt + output; Aphrodite 0.6 only looked at the
// prompt, a bug): ban every token that would complete an n-gram already present.

void apply_no_repeat_ngram(RowLogits& row, const SamplingParams& p, const SamplingState& s) {
  const int ng = p.no_repeat_ngram_size;
  if (ng <= 0) return;
  RowBuffers& b = row.buffers();
  build_history(s, b.hist);
  const auto& h = b.hist;
  const int L = static_cast<int>(h.size());
  if (L + 1 < ng) return;
  const int pre = ng - 1;  // prefix length
  for (int i = 0; i + ng <= L; ++i) {
    bool same = true;
    for (int j = 0; j < pre && same; ++j) same = h[i + j] == h[L - pre + j];
    if (same) row.mask_one(h[i + pre]);
  }
}

// ------------------------------------------------------------------------------------------------
// Temperature, with dynamic temperature (entropy-scaled between dynatemp_min and dynatemp_max).

void apply_temperature(RowLogits& row, const SamplingParams& p) {
  double t = p.temperature;
  if (p.dynatemp_enabled()) {
    float m;
    double z;
    row.stats(m, z);
    const double log_z = std::log(z);
    double ent = 0.0;
    size_t count = 0;
    row.for_each_live([&](int32_t, float v) {
      const double lp = static_cast<double>(v) - m - log_z;
      ent -= std::exp(lp) * lp;
      ++count;
    });
    const double norm = ent / std::log(static_cast<double>(count));
    t = p.dynatemp_min + (p.dynatemp_max - p.dynatemp_min) * std::pow(norm, p.dynatemp_exponent);
    if (!(t > 1e-5)) t = 1e-5;  // NaN (one live token) or too small: Aphrodite's _SAMPLING_EPS
  }
  cpu_sampling::apply_temperature(row, t);
}

// ------------------------------------------------------------------------------------------------

void run_chain(RowLogits& row, const SamplingParams& p, SamplingState& s) {
  // Greedy rows take the argmax at the end; the samplers that always keep the argmax and
  // temperature (monotone) cannot change it and are skipped. Typical, quadratic and XTC can.
  const bool greedy = p.temperature == 0.0f;
  const std::vector<SamplerId> order = p.sampler_order();
  for (SamplerId id : order) {
    switch (id) {
      case SamplerId::Dry:
        apply_dry(row, p, s);
        break;
      case SamplerId::Penalties:
        apply_penalties(row, p, s);
        break;
      case SamplerId::NoRepeatNgram:
        apply_no_repeat_ngram(row, p, s);
        break;
      case SamplerId::Temperature:
        if (!greedy) apply_temperature(row, p);
        break;
      case SamplerId::TopNsigma:
        if (!greedy) cpu_sampling::apply_top_nsigma(row, p.nsigma);
        break;
      case SamplerId::TopPTopK:
        if (!greedy) cpu_sampling::apply_top_k_top_p(row, p.top_k, p.top_p);
        break;
      case SamplerId::TopA:
        if (!greedy) cpu_sampling::apply_top_a(row, p.top_a);
        break;
      case SamplerId::MinP:
        if (!greedy) cpu_sampling::apply_min_p(row, p.min_p);
        break;
      case SamplerId::Tfs:
        if (!greedy) cpu_sampling::apply_tfs(row, p.tfs);
        break;
      case SamplerId::EtaCutoff:
        if (!greedy) cpu_sampling::apply_eta_cutoff(row, p.eta_cutoff);
        break;
      case SamplerId::EpsilonCutoff:
        if (!greedy) cpu_sampling::apply_epsilon_cutoff(row, p.epsilon_cutoff);
        break;
      case SamplerId::TypicalP:
        cpu_sampling::apply_typical(row, p.typical_p);
        break;
      case SamplerId::Quadratic:
        cpu_sampling::apply_quadratic(row, p.smoothing_factor, p.smoothing_curve);
        break;
      case SamplerId::Xtc:
        if (p.xtc_probability > 0.0f) cpu_sampling::apply_xtc(row, p.xtc_threshold, p.xtc_probability, s.uniform(1));
        break;
    }
  }
}

}  // namespace cypris::sampling_detail
