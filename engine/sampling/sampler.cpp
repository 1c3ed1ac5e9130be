// The batched sampler: per-row processing (sampler_chain.cpp), the draw, logprobs, threading.
#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <thread>

#include "engine/common/error.h"
#include "engine/sampling/fast_math.h"
#include "engine/sampling/sampler_chain.h"

namespace cypris {

using sampling_detail::kNegInf;
using sampling_detail::RowBuffers;
using sampling_detail::RowLogits;

// ------------------------------------------------------------------------------------------------
// SamplingState

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

SamplingState::SamplingState(const SamplingParams& params, std::vector<int32_t> prompt_ids, uint32_t seq_index)
    : SamplingState(params, std::move(prompt_ids), seq_index,
                    params.seed ? *params.seed
                                : (static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}())) {}

SamplingState::SamplingState(const SamplingParams& params, std::vector<int32_t> prompt_ids, uint32_t seq_index,
                             uint64_t seed)
    : prompt_ids_(std::move(prompt_ids)) {
  // Mix the sequence index in so a request's sequences differ, and seed 0/1/2 are far apart.
  stream_key_ = splitmix64(seed ^ splitmix64(0xC1A55ull + seq_index));
  mirostat_mu_ = 2.0f * params.mirostat_tau;
}

void SamplingState::rewind(size_t num_tokens) {
  num_tokens = std::min(num_tokens, output_ids_.size());
  output_ids_.resize(output_ids_.size() - num_tokens);
  position_bans_.erase(position_bans_.upper_bound(output_ids_.size()), position_bans_.end());
}

void SamplingState::ban_at_next_position(int32_t token) {
  auto& bans = position_bans_[output_ids_.size()];
  if (std::find(bans.begin(), bans.end(), token) == bans.end()) bans.push_back(token);
}

std::span<const int32_t> SamplingState::next_position_bans() const {
  auto it = position_bans_.find(output_ids_.size());
  if (it == position_bans_.end()) return {};
  return it->second;
}

SamplerSet active_samplers(const SamplerRow& row) {
  SamplerSet a = row.params->active_samplers();
  if (a.has(SamplerFeature::MinTokens) &&
      static_cast<int64_t>(row.state->output_ids().size()) >= row.params->min_tokens) {
    a.remove(SamplerFeature::MinTokens);  // the EOS / stop-id ban is over
  }
  if (!row.state->next_position_bans().empty()) a.add(SamplerFeature::PositionBans);
  if (row.allowed_mask) a.add(SamplerFeature::GuidedMask);
  return a;
}

// ------------------------------------------------------------------------------------------------
// Logprobs of the raw logits

namespace {

struct RawStats {
  float max_v;
  double log_z;  // log sum exp(x - max)
};

RawStats raw_stats(const float* x, int32_t V) {
  const float m = sampling_detail::max_of(x, V);
  return {m, std::log(sampling_detail::sum_exp(x, V, m))};
}

float logprob_of(const float* x, const RawStats& st, int32_t token) {
  return static_cast<float>(static_cast<double>(x[token]) - st.max_v - st.log_z);
}

void fill_top_and_rank(const float* x, int32_t V, const RawStats& st, int num_top, SampleOutput& out) {
  const float v = x[out.token];
  int32_t rank = 1;
  for (int32_t i = 0; i < V; ++i) rank += x[i] > v;
  out.rank = rank;
  out.top_logprobs.clear();
  if (num_top <= 0) return;
  // Bounded min-heap of (value, -id) so equal values prefer the lower id.
  std::vector<std::pair<float, int32_t>> heap;
  heap.reserve(num_top + 1);
  auto cmp = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  for (int32_t i = 0; i < V; ++i) {
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
  for (const auto& [val, id] : heap) out.top_logprobs.push_back({id, logprob_of(x, st, id)});
}

}  // namespace

SampleOutput token_logprobs(std::span<const float> logits, int32_t token, int num_top) {
  const int32_t V = static_cast<int32_t>(logits.size());
  CYPRIS_CHECK(token >= 0 && token < V, "token_logprobs: token id {} is outside the vocabulary (0 to {})", token,
               V - 1);
  const RawStats st = raw_stats(logits.data(), V);
  SampleOutput out;
  out.token = token;
  out.logprob = logprob_of(logits.data(), st, token);
  fill_top_and_rank(logits.data(), V, st, num_top, out);
  return out;
}

std::vector<SampleOutput> prompt_logprobs(const float* logits, int32_t vocab_size, std::span<const int32_t> next_tokens,
                                          int num_top) {
  std::vector<SampleOutput> out;
  out.reserve(next_tokens.size());
  for (size_t i = 0; i < next_tokens.size(); ++i) {
    out.push_back(token_logprobs({logits + i * static_cast<size_t>(vocab_size), static_cast<size_t>(vocab_size)},
                                 next_tokens[i], num_top));
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Sampler

struct Sampler::Scratch {
  RowBuffers buf;
};

Sampler::Sampler(SamplerConfig config) : config_(config) {
  CYPRIS_CHECK(config_.vocab_size > 0, "sampler: vocab_size must be > 0, got {}", config_.vocab_size);
  CYPRIS_CHECK(config_.max_log_probs >= 0, "sampler: max_log_probs must be >= 0, got {}", config_.max_log_probs);
  const int threads = std::max(1, config_.num_threads);
  for (int t = 0; t < threads; ++t) {
    auto* s = new Scratch;
    s->buf.logits.resize(config_.vocab_size);
    s->buf.counts.assign(config_.vocab_size, 0);
    s->buf.seen.assign(config_.vocab_size, 0);
    scratch_.push_back(s);
  }
}

Sampler::~Sampler() {
  for (Scratch* s : scratch_) delete s;
}

namespace {

// A row whose logits go straight to the draw (kPlainSamplers, in the default order).
bool is_plain(const SamplingParams& p, SamplerSet active) {
  return active.subset_of(kPlainSamplers) && p.in_default_order(active);
}

int32_t raw_argmax(const float* x, int32_t V) {
  return sampling_detail::argmax_of(x, V);
}

// Draws from the live tokens of `row` after softmax and skew: the inverse CDF at u in vocabulary
// order, as the GPU sampler draws (kernels/cuda/sampling.cu), so the same logits and uniform give
// the same token on either device.
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
  for (int32_t id : ids) pr.push_back(sampling_detail::fast_exp(x[id] - m) / z);
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

// Processes one row and returns the token. `x` is the per-thread working buffer.
int32_t sample_row(const float* raw, const SamplingParams& p, SamplingState& s, const uint32_t* allowed_mask,
                   const SamplerConfig& cfg, RowBuffers& buf, std::vector<float>* dense_out,
                   std::vector<float>* probs_out) {
  const int32_t V = cfg.vocab_size;
  const bool greedy = p.temperature == 0.0f;
  const bool want_debug = dense_out || probs_out;
  if (!want_debug && is_plain(p, active_samplers(SamplerRow{&p, &s, allowed_mask}))) {
    if (greedy) return raw_argmax(raw, V);
    // Fast path: top-k by partial selection on the raw logits (temperature does not change the
    // order), then temperature and top-p on the few survivors only.
    if (p.top_k > 0 && p.top_k < V) {
      RowLogits sel(const_cast<float*>(raw), V, buf);  // read-only use: selection only
      float* x = buf.logits.data();
      sampling_detail::apply_top_k_top_p(sel, p.top_k, 1.0f);
      if (!sel.sparse()) goto general;  // fewer than top_k finite logits: nothing was selected
      RowLogits row(x, V, buf);
      std::vector<int32_t> ids(buf.live.begin(), buf.live.end());
      for (int32_t id : ids) x[id] = raw[id];
      row.keep_only(std::move(ids), true);
      sampling_detail::apply_temperature(row, p);
      sampling_detail::apply_top_k_top_p(row, -1, p.top_p);
      return draw(row, 0.0f, s.uniform(), nullptr);
    }
  }
general:
  float* x = buf.logits.data();
  std::memcpy(x, raw, sizeof(float) * static_cast<size_t>(V));
  RowLogits row(x, V, buf);
  sampling_detail::apply_pre_chain(row, p, s, cfg.eos_token_id, allowed_mask);
  int32_t token = -1;
  if (p.mirostat_mode == 2 && !greedy) {
    float max_v;
    double log_z;
    sampling_detail::apply_mirostat_mask(row, s.mirostat_mu(), max_v, log_z);
    if (dense_out) {
      row.densify();
      *dense_out = std::vector<float>(x, x + V);
      return -1;
    }
    token = draw(row, 0.0f, s.uniform(), probs_out);
    if (token >= 0) {
      const double surprise = -(static_cast<double>(x[token]) - max_v - log_z) / std::log(2.0);
      s.set_mirostat_mu(static_cast<float>(s.mirostat_mu() - p.mirostat_eta * (surprise - p.mirostat_tau)));
    }
  } else {
    sampling_detail::run_chain(row, p, s);
    if (dense_out) {
      row.densify();
      *dense_out = std::vector<float>(x, x + V);
      return -1;
    }
    if (greedy) {
      token = row.argmax();
      if (probs_out) {
        probs_out->assign(V, 0.0f);
        if (token >= 0) (*probs_out)[token] = 1.0f;
      }
    } else {
      token = draw(row, p.skew, s.uniform(), probs_out);
    }
  }
  // Every token masked (e.g. allowed_token_ids all banned): fall back to the model's own choice
  // rather than fail the request.
  if (token < 0) token = raw_argmax(raw, V);
  return token;
}

}  // namespace

std::vector<SampleOutput> Sampler::sample(const float* logits, std::span<const SamplerRow> rows) {
  const int32_t V = config_.vocab_size;
  std::vector<SampleOutput> out(rows.size());
  auto work = [&](size_t begin, size_t end, Scratch& sc) {
    for (size_t r = begin; r < end; ++r) {
      const float* raw = logits + r * static_cast<size_t>(V);
      const SamplingParams& p = *rows[r].params;
      SamplingState& s = *rows[r].state;
      SampleOutput& o = out[r];
      o.token = sample_row(raw, p, s, rows[r].allowed_mask, config_, sc.buf, nullptr, nullptr);
      const RawStats st = raw_stats(raw, V);
      o.logprob = logprob_of(raw, st, o.token);
      if (p.logprobs) {
        fill_top_and_rank(raw, V, st, std::min(*p.logprobs, config_.max_log_probs), o);
      }
      s.append(o.token);
    }
  };
  const size_t n = rows.size();
  const size_t threads = std::min(scratch_.size(), std::max<size_t>(1, n / 4));
  if (threads <= 1) {
    work(0, n, *scratch_[0]);
    return out;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(threads);
  const size_t chunk = (n + threads - 1) / threads;
  for (size_t t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        work(std::min(n, t * chunk), std::min(n, (t + 1) * chunk), *scratch_[t]);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  try {
    work(0, std::min(n, chunk), *scratch_[0]);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

std::vector<float> Sampler::process(std::span<const float> logits, const SamplingParams& params, SamplingState& state,
                                    const uint32_t* allowed_mask) {
  CYPRIS_CHECK(static_cast<int32_t>(logits.size()) == config_.vocab_size,
               "sampler: a row has {} logits, the vocabulary has {}", logits.size(), config_.vocab_size);
  std::vector<float> dense;
  sample_row(logits.data(), params, state, allowed_mask, config_, scratch_[0]->buf, &dense, nullptr);
  return dense;
}

void Sampler::beam_logprobs(std::span<const float> logits, const SamplingParams& params, const SamplingState& state,
                            std::span<float> out) {
  CYPRIS_CHECK(static_cast<int32_t>(logits.size()) == config_.vocab_size && out.size() == logits.size(),
               "sampler: a row has {} logits (output {}), the vocabulary has {}", logits.size(), out.size(),
               config_.vocab_size);
  std::copy(logits.begin(), logits.end(), out.begin());
  sampling_detail::RowLogits row(out.data(), config_.vocab_size, scratch_[0]->buf);
  sampling_detail::apply_pre_chain(row, params, state, config_.eos_token_id, nullptr);
  sampling_detail::apply_penalties(row, params, state);
  row.densify();
  float max_v = sampling_detail::kNegInf;
  for (float v : out) max_v = std::max(max_v, v);
  if (max_v == sampling_detail::kNegInf) return;  // everything masked: no continuation
  double z = 0.0;
  for (float v : out) z += std::exp(static_cast<double>(v) - max_v);
  const double lz = std::log(z) + max_v;
  for (float& v : out) v = static_cast<float>(v - lz);
}

std::vector<float> Sampler::probabilities(std::span<const float> logits, const SamplingParams& params,
                                          SamplingState& state, const uint32_t* allowed_mask) {
  CYPRIS_CHECK(static_cast<int32_t>(logits.size()) == config_.vocab_size,
               "sampler: a row has {} logits, the vocabulary has {}", logits.size(), config_.vocab_size);
  std::vector<float> probs;
  sample_row(logits.data(), params, state, allowed_mask, config_, scratch_[0]->buf, nullptr, &probs);
  return probs;
}

float Sampler::mirostat_mu_after(std::span<const float> logits, const SamplingParams& params,
                                 const SamplingState& state, int32_t token, const uint32_t* allowed_mask) {
  const int32_t V = config_.vocab_size;
  CYPRIS_CHECK(static_cast<int32_t>(logits.size()) == V, "sampler: a row has {} logits, the vocabulary has {}",
               logits.size(), V);
  const float mu = state.mirostat_mu();
  if (params.mirostat_mode != 2 || params.temperature == 0.0f || token < 0 || token >= V) return mu;
  // The same surprise sample_row measures: of the token under the distribution after the
  // pre-chain masks, before Mirostat's own cut.
  sampling_detail::RowBuffers& buf = scratch_[0]->buf;
  float* x = buf.logits.data();
  std::memcpy(x, logits.data(), sizeof(float) * static_cast<size_t>(V));
  sampling_detail::RowLogits row(x, V, buf);
  sampling_detail::apply_pre_chain(row, params, state, config_.eos_token_id, allowed_mask);
  if (!row.is_live(token)) return mu;
  float max_v;
  double z;
  row.stats(max_v, z);
  const double surprise = -(static_cast<double>(x[token]) - max_v - std::log(z)) / std::log(2.0);
  return static_cast<float>(mu - params.mirostat_eta * (surprise - params.mirostat_tau));
}

}  // namespace cypris
