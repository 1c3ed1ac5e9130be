// The batched sampler: per-row processing (sampler_chain.cpp), the draw and logprobs (the CPU's
// samplers, kernels/cpu/samplers.h), threading.
#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <thread>

#include "engine/common/error.h"
#include "engine/sampling/sampler_chain.h"
#include "kernels/cpu/samplers.h"

namespace cypris {

using cpu_sampling::kNegInf;
using cpu_sampling::RowBuffers;
using cpu_sampling::RowLogits;

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

using cpu_sampling::logprob_of;
using cpu_sampling::raw_stats;
using cpu_sampling::RawStats;

void fill_top_and_rank(const float* x, int32_t V, const RawStats& st, int num_top, SampleOutput& out) {
  out.rank = cpu_sampling::rank_of(x, V, out.token);
  out.top_logprobs.clear();
  for (const auto& [id, lp] : cpu_sampling::top_logprobs(x, V, st, num_top)) out.top_logprobs.push_back({id, lp});
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
    scratch_.push_back(new Scratch{cpu_sampling::make_buffers(config_.vocab_size)});
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

using cpu_sampling::draw;
using cpu_sampling::raw_argmax;

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
      cpu_sampling::apply_top_k_top_p(sel, p.top_k, 1.0f);
      if (!sel.sparse()) goto general;  // fewer than top_k finite logits: nothing was selected
      RowLogits row(x, V, buf);
      std::vector<int32_t> ids(buf.live.begin(), buf.live.end());
      for (int32_t id : ids) x[id] = raw[id];
      row.keep_only(std::move(ids), true);
      sampling_detail::apply_temperature(row, p);
      cpu_sampling::apply_top_k_top_p(row, -1, p.top_p);
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
    cpu_sampling::apply_mirostat_mask(row, s.mirostat_mu(), max_v, log_z);
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
  RowLogits row(out.data(), config_.vocab_size, scratch_[0]->buf);
  sampling_detail::apply_pre_chain(row, params, state, config_.eos_token_id, nullptr);
  sampling_detail::apply_penalties(row, params, state);
  row.densify();
  float max_v = kNegInf;
  for (float v : out) max_v = std::max(max_v, v);
  if (max_v == kNegInf) return;  // everything masked: no continuation
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
