// RequestTracker: per-request bookkeeping around the engine step (request_tracker.h).
#include "engine/core/request_tracker.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <unordered_set>

#include "engine/core/lora_table.h"

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/core/request_state.h"
#include "engine/core/stats.h"
#include "engine/request/request.h"
#include "engine/request/sampling_params.h"
#include "engine/runtime/model_runner.h"  // Logits
#include "engine/sampling/gpu_sampling.h"
#include "engine/scheduler/scheduler.h"
#include "engine/spec/rejection_sampler.h"
#include "engine/spec/typical_acceptance.h"
#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/stop_strings.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/common/philox.h"

namespace cypris {

namespace {

// banned_strings: a sequence that keeps running into banned phrases ends with an error after this
// many rewinds rather than spend the server's time forever.
constexpr int kMaxBannedStringRewinds = 4096;

// True when the sampler has no token left at a position: the banned-string bans there, the
// request's custom_token_bans and, with allowed_token_ids, every token outside them cover the
// vocabulary. Checked only once the bans could cover it (a rewind stays cheap).
bool every_token_banned(const SamplingParams& p, std::span<const int32_t> position_bans, int64_t vocab_size) {
  const size_t candidates = p.allowed_token_ids ? p.allowed_token_ids->size() : static_cast<size_t>(vocab_size);
  if (position_bans.size() + p.custom_token_bans.size() < candidates) return false;
  std::unordered_set<int32_t> banned(position_bans.begin(), position_bans.end());
  banned.insert(p.custom_token_bans.begin(), p.custom_token_bans.end());
  if (p.allowed_token_ids) {
    for (int32_t id : *p.allowed_token_ids) {
      if (!banned.count(id)) return false;
    }
    return true;
  }
  return static_cast<int64_t>(banned.size()) >= vocab_size;
}

// Speculative decoding back-off: a sequence whose recent drafts are accepted less often than this
// decodes kSpecPauseSteps steps without drafts, then tries again.
constexpr double kMinSpecAcceptance = 0.125;
constexpr int kSpecPauseSteps = 16;

}  // namespace

RequestTracker::RequestTracker(const TrackerConfig& config, Scheduler& scheduler, Sampler& sampler,
                               const Tokenizer* tokenizer, std::vector<int32_t> eos_ids)
    : cfg_(config),
      unseeded_rng_(config.seed),
      scheduler_(scheduler),
      sampler_(sampler),
      tokenizer_(tokenizer),
      eos_ids_(std::move(eos_ids)) {}

RequestTracker::~RequestTracker() = default;

size_t StepRows::num_host_rows() const {
  size_t n = host.size() + beam.size();
  for (const auto& p : prompt) n += static_cast<size_t>(p.count);
  return n;
}

std::unique_ptr<guided::GuidedMatcher> RequestTracker::make_guided_matcher(const SamplingParams& p) {
  CYPRIS_CHECK(tokenizer_, "guided decoding needs the tokenizer (the engine runs with --skip-tokenizer-init)");
  if (!guided_) {
    guided_ = std::make_unique<guided::GuidedDecoder>(
        guided::vocab_from_tokenizer(*tokenizer_, static_cast<int32_t>(cfg_.vocab_size), eos_ids_));
    LOG_INFO("guided decoding: Cypris's grammar engine (requested backend: {})", cfg_.guided_backend);
  }
  return guided_->make_matcher(p.guided);
}

std::unique_ptr<IncrementalDetokenizer> RequestTracker::make_detokenizer(const SamplingParams& p,
                                                                         std::span<const int32_t> prompt) const {
  if (!tokenizer_) return nullptr;
  DetokenizeOptions dopts{p.skip_special_tokens, p.spaces_between_special_tokens};
  const size_t ctx = std::min(prompt.size(), IncrementalDetokenizer::kDefaultContextTokens);
  return std::make_unique<IncrementalDetokenizer>(*tokenizer_, dopts, prompt.last(ctx));
}

void RequestTracker::add(GenerateRequest req, std::shared_ptr<RequestStream> stream) {
  CYPRIS_CHECK(req.params != nullptr, "request {} has no sampling parameters", req.request_id);
  CYPRIS_CHECK(!groups_.count(req.request_id), "request id '{}' is already in use", req.request_id);
  // The prompts of one client request share their parameters: they are checked, copied and their
  // banned-string automaton built once, not once per prompt.
  if (req.params != prepared_.source) {
    prepared_ = {};
    auto p = std::make_shared<SamplingParams>(*req.params);
    p->validate(cfg_.max_log_probs, static_cast<int32_t>(cfg_.vocab_size));
    CYPRIS_CHECK(!(p->use_beam_search && !p->banned_strings.empty()),
                 "banned_strings cannot be combined with use_beam_search: give one or the other");
    CYPRIS_CHECK(!(p->use_beam_search && cfg_.spec_decode),
                 "use_beam_search is not supported with speculative decoding (--speculative-model); this server "
                 "speculates, so send the request without use_beam_search");
    CYPRIS_CHECK(!p->use_beam_search || p->effective_best_of() <= cfg_.max_num_seqs,
                 "use_beam_search: best_of (the beam width) is {}, more than --max-num-seqs {}", p->effective_best_of(),
                 cfg_.max_num_seqs);
    if (tokenizer_ && p->dry_multiplier > 0.0f && p->dry_sequence_breaker_ids.empty()) {
      p->resolve_dry_sequence_breakers(
          [this](const std::string& s) { return tokenizer_->encode(s, /*add_special_tokens=*/false); });
    }
    if (p->guided.active()) guided::check_token_restrictions(*make_guided_matcher(*p), *p);
    std::shared_ptr<const BannedStrings> banned;
    if (!p->banned_strings.empty()) banned = std::make_shared<const BannedStrings>(p->banned_strings);
    prepared_ = {req.params, std::move(p), std::move(banned)};
  }
  const std::shared_ptr<SamplingParams> params = prepared_.params;
  CYPRIS_CHECK(!req.prompt_token_ids.empty(), "the prompt is empty: give at least one token");
  for (int32_t id : req.prompt_token_ids) {
    CYPRIS_CHECK(id >= 0 && id < cfg_.vocab_size,
                 "prompt token id {} is out of range; this model's vocabulary has {} "
                 "tokens",
                 id, cfg_.vocab_size);
  }
  if (params->truncate_prompt_tokens && *params->truncate_prompt_tokens > 0 &&
      static_cast<int64_t>(req.prompt_token_ids.size()) > *params->truncate_prompt_tokens) {
    req.prompt_token_ids.erase(req.prompt_token_ids.begin(),
                               req.prompt_token_ids.end() - *params->truncate_prompt_tokens);
  }
  const int64_t prompt_len = static_cast<int64_t>(req.prompt_token_ids.size());
  const int64_t max_tokens = params->max_tokens.value_or(cfg_.max_model_len - prompt_len);
  // --context-shift: old tokens make room for new ones, only the prompt must fit (Scheduler::check_request).
  const bool shifts = scheduler_.config().context_shift && prompt_len < cfg_.max_model_len;
  CYPRIS_CHECK(shifts || prompt_len + max_tokens <= cfg_.max_model_len,
               "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
               "prompt, {} for the completion). Please reduce the prompt or the completion length.",
               cfg_.max_model_len, prompt_len + max_tokens, prompt_len, max_tokens);
  CYPRIS_CHECK(max_tokens >= 1,
               "This model's maximum context length is {} tokens and the prompt has {}: no room is "
               "left for a completion.",
               cfg_.max_model_len, prompt_len);

  auto g = std::make_unique<Group>();
  g->n = params->n;
  g->num_prompt_tokens = prompt_len;
  g->stream = std::move(stream);
  g->req = std::move(req);
  g->req.params = params;
  g->banned = prepared_.banned;
  // A request without a seed draws one from the generator --seed seeded (each prompt its own).
  g->seed = params->seed ? *params->seed : unseeded_rng_();
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (params->use_beam_search) {
    add_beam_request(*g, params, now);
  } else {
    const auto& prompt = g->req.prompt_token_ids;
    const int num_seqs = params->effective_best_of();
    g->hold_until_done = num_seqs > params->n;
    std::vector<std::shared_ptr<Request>> created;
    try {
      for (int i = 0; i < num_seqs; ++i) {
        auto seq = std::make_unique<Seq>();
        seq->group = g.get();
        seq->index = i;
        const std::string id = num_seqs == 1 ? g->req.request_id : fmt::format("{}#{}", g->req.request_id, i);
        seq->req =
            std::make_shared<Request>(id, prompt, static_cast<int32_t>(max_tokens), params, g->req.priority, now);
        set_lora(*seq->req, g->req);
        seq->sampling = SamplingState(*params, prompt, static_cast<uint32_t>(i), g->seed);
        seq->spec_length = AdaptiveDraftLength(cfg_.spec_num_tokens);
        if (params->guided.active()) seq->guided = make_guided_matcher(*params);
        seq->detok = make_detokenizer(*params, prompt);
        if (seq->detok)
          seq->stops = std::make_unique<StopStringMatcher>(params->stop, params->include_stop_str_in_output);
        if (g->banned) {
          seq->banned = std::make_unique<BannedStringMatcher>(g->banned);
          seq->cumulative_at.push_back(0.0);
        }
        scheduler_.add_request(seq->req);
        created.push_back(seq->req);
        seqs_[id] = seq.get();
        g->seqs.push_back(std::move(seq));
      }
    } catch (...) {
      for (auto& r : created) {
        scheduler_.abort_request(r->request_id());
        seqs_.erase(r->request_id());
      }
      throw;
    }
  }
  log_request(cfg_.logging, g->req.request_id, g->req.prompt,
              fmt::format("prompt tokens: {}, max_tokens: {}, n: {}, temperature: {}{}", prompt_len, max_tokens,
                          params->n, params->temperature,
                          params->use_beam_search ? fmt::format(", beam width: {}", params->effective_best_of()) : ""));
  groups_[g->req.request_id] = std::move(g);
}

bool RequestTracker::uses_lora(uint64_t lora_id) const {
  for (const auto& [id, g] : groups_) {
    if (g->req.lora_id == lora_id) return true;
  }
  return false;
}

uint64_t RequestTracker::lora_id_of(const std::string& request_id) const {
  auto it = seqs_.find(request_id);
  return it == seqs_.end() ? 0 : it->second->group->req.lora_id;
}

void set_lora(Request& r, const GenerateRequest& req) {
  r.set_lora_slot(req.lora_slot);
  // KV computed under an adapter is keyed by it: no other adapter or the base shares its blocks.
  r.set_cache_salt(lora_cache_salt(req.lora_id));
}

void RequestTracker::abort(const std::string& request_id) {
  auto it = groups_.find(request_id);
  if (it == groups_.end()) return;
  fail_group(*it->second, std::nullopt);
}

void RequestTracker::fail_group(Group& g, std::optional<std::string> error) {
  RequestOutput out;
  end_group(g, std::move(error), out);
  emit(g, out);
}

void RequestTracker::end_group(Group& g, std::optional<std::string> error, RequestOutput& out) {
  out.error = std::move(error);
  if (g.beam) {
    finish_beam(g, "abort", out);
    return;
  }
  for (auto& s : g.seqs) {
    if (s->finished) continue;
    scheduler_.abort_request(s->req->request_id());
    finish_seq(*s, "abort", out);
  }
}

void RequestTracker::finish_seq(Seq& s, const std::string& reason, RequestOutput& out) {
  if (s.finished) return;
  s.finished = true;
  s.group->num_finished++;
  CompletionDelta* d = &out.delta(s.index);
  if (s.detok && !(s.stops && s.stops->stopped())) {
    std::string tail = s.detok->finish();
    StopCheck c = s.stops->push(tail);
    d->text += c.text + (c.stopped() ? "" : s.stops->flush());
  }
  d->finish_reason = reason;
  d->cumulative_logprob = s.cumulative_logprob;
  seqs_.erase(s.req->request_id());
}

bool RequestTracker::emit_token(Seq& s, int32_t token, std::string_view text, PositionLogprobs* logprobs,
                                RequestOutput& out) {
  Group& g = *s.group;
  CompletionDelta& d = out.delta(s.index);
  d.token_ids.push_back(token);
  g.num_generated++;
  if (logprobs) d.logprobs.push_back(std::move(*logprobs));
  if (!s.stops || s.stops->stopped()) return false;
  StopCheck c = s.stops->push(text);
  d.text += c.text;
  if (!c.stopped()) return false;
  d.stop_reason = g.req.params->stop[*c.stop_index];
  scheduler_.finish_request(s.req->request_id(), RequestStatus::FinishedStopped);  // false when it already ended
  finish_seq(s, "stop", out);
  return true;
}

void RequestTracker::release_banned(Seq& s, bool all, RequestOutput& out) {
  const bool with_logprobs = s.group->req.params->logprobs.has_value();
  const size_t upto = all ? s.banned->num_tokens() : s.banned->safe_tokens();
  while (s.banned_sent_tokens < upto && !s.finished) {
    const size_t j = s.banned_sent_tokens++;
    std::optional<PositionLogprobs> lp;
    if (with_logprobs && !s.held_logprobs.empty()) {
      lp = std::move(s.held_logprobs.front());
      s.held_logprobs.pop_front();
    }
    emit_token(s, s.banned->token_id(j), s.banned->token_text(j), lp ? &*lp : nullptr, out);
  }
}

void RequestTracker::rewind_banned(Seq& s, const BannedStringHit& hit, RequestOutput& out) {
  if (++s.num_rewinds > kMaxBannedStringRewinds) {
    LOG_WARN("request {}: banned_strings: gave up after {} rewinds", s.group->req.request_id, kMaxBannedStringRewinds);
    end_group(*s.group,
              fmt::format("banned_strings: the model kept producing banned phrases; gave up after {} rewinds "
                          "(fewer or longer phrases leave it a way around them)",
                          kMaxBannedStringRewinds),
              out);
    out.client_error = true;  // the phrases asked for the impossible: the client's doing
    return;
  }
  // The sampled token is in the matcher and the sampler state but not in the request.
  const size_t k = hit.rewind_tokens;
  scheduler_.rewind_request(s.req->request_id(), static_cast<int32_t>(k - 1));
  s.banned->rewind(k);
  s.sampling.rewind(k);
  if (s.guided) s.guided->rollback(k);
  s.sampling.ban_at_next_position(hit.ban_token_id);
  const size_t kept = s.banned->num_tokens();
  if (s.banned_sent_tokens > kept) throw std::logic_error("banned strings: a rewind reached tokens already sent");
  if (s.held_logprobs.size() > kept - s.banned_sent_tokens) s.held_logprobs.resize(kept - s.banned_sent_tokens);
  s.cumulative_at.resize(kept + 1);
  s.cumulative_logprob = s.cumulative_at.back();
  // The detokenizer cannot go back: a new one reads the kept tokens again (their text is known).
  const SamplingParams& p = *s.group->req.params;
  s.detok = make_detokenizer(p, s.req->prompt_token_ids());
  if (s.detok) s.detok->push(s.req->output_token_ids());
  if (every_token_banned(p, s.sampling.next_position_bans(), cfg_.vocab_size)) {
    // Every token is banned here: no continuation can avoid the phrases, say so now rather than
    // after the rest of the rewind budget.
    const size_t pos = s.sampling.output_ids().size();
    end_group(*s.group,
              fmt::format("banned_strings: every token of the vocabulary leads into a banned phrase at output "
                          "position {}; no continuation avoids them",
                          pos),
              out);
    out.client_error = true;
  }
}

void RequestTracker::emit(Group& g, RequestOutput& out) {
  if (g.hold_until_done) {
    for (auto& d : out.outputs) {
      Seq& s = *g.seqs[static_cast<size_t>(d.index)];
      s.all.text += d.text;
      s.all.token_ids.insert(s.all.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
      s.all.logprobs.insert(s.all.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish_reason) s.all.finish_reason = d.finish_reason;
      if (d.stop_reason) s.all.stop_reason = d.stop_reason;
    }
  }
  const bool done = g.done();
  if (g.hold_until_done) {
    if (!done) return;
    // best_of > n: return the n sequences with the highest cumulative logprob.
    std::vector<Seq*> order;
    for (auto& s : g.seqs) order.push_back(s.get());
    std::stable_sort(order.begin(), order.end(),
                     [](const Seq* a, const Seq* b) { return a->cumulative_logprob > b->cumulative_logprob; });
    out.outputs.clear();
    for (int i = 0; i < g.n; ++i) {
      CompletionDelta d = order[static_cast<size_t>(i)]->all;
      d.index = i;
      d.cumulative_logprob = order[static_cast<size_t>(i)]->cumulative_logprob;
      out.outputs.push_back(std::move(d));
    }
  }
  if (out.outputs.empty() && !done) return;
  std::sort(out.outputs.begin(), out.outputs.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  if (!g.first_output_sent && g.req.params->prompt_logprobs) {
    out.prompt_logprobs = std::move(g.seqs.front()->pending_prompt_logprobs);
  }
  out.request_id = g.req.request_id;
  out.finished = done;
  out.num_prompt_tokens = g.num_prompt_tokens;
  out.num_cached_prompt_tokens = g.num_cached_prompt_tokens;
  out.num_generated_tokens = g.num_generated;
  if (g.stream) g.stream->push(std::move(out));
  g.first_output_sent = true;
  if (done) groups_.erase(g.req.request_id);  // g is gone after this line
}

// ------------------------------------------------------------------------------------------------
// One step

StepRows RequestTracker::plan_rows(const SchedulerOutput& so, BatchContext& batch, bool device_ok) {
  StepRows rows;
  // Sampled rows: each goes to the GPU sampler when the runner can sample there and the row's
  // samplers are all on the GPU path, else to the CPU sampler; beam rows go to the beam search.
  std::vector<int32_t> device_idx, host_idx, beam_idx;
  std::vector<int32_t> device_seq, host_seq, beam_seq;
  std::vector<Seq*> host_seqs;
  for (size_t j = 0; j < batch.sampled_seqs.size(); ++j) {
    const int32_t k = batch.sampled_seqs[j];
    const ScheduledRequest& sr = so.scheduled[static_cast<size_t>(k)];
    Seq* s = seqs_.at(sr.request->request_id());
    const int32_t li = batch.logits_indices[j];
    s->drafts = sr.spec_token_ids;
    if (!s->drafts.empty()) {
      // Speculative decoding: rows j .. j + drafts are the verified positions, sampled on the CPU,
      // each with the history up to its position.
      const size_t m = s->drafts.size() + 1;
      s->draft_states.assign(m - 1, s->sampling);
      for (size_t i = 1; i < m; ++i) {
        for (size_t t = 0; t < i; ++t) s->draft_states[i - 1].append(s->drafts[t]);
      }
      // Guided decoding: row i's mask is the grammar's after drafts 0..i-1, from the matcher
      // advanced over them and rolled back. A row after a draft the grammar rejects keeps that
      // row's mask: verification stops at the rejected draft, so its draw is never used.
      const size_t words = s->guided ? s->guided->mask_words() : 0;
      if (s->guided) {
        s->guided_mask.resize(m * words);
        size_t advanced = 0;
        bool valid = true;
        for (size_t i = 0; i < m; ++i) {
          const std::span<uint32_t> mask(s->guided_mask.data() + i * words, words);
          if (valid) {
            s->guided->fill_mask(mask);
          } else {
            std::copy_n(s->guided_mask.data() + (i - 1) * words, words, mask.data());
          }
          if (valid && i + 1 < m) {
            valid = s->guided->accept(s->drafts[i]);
            if (valid) ++advanced;
          }
        }
        s->guided->rollback(advanced);
      }
      for (size_t i = 0; i < m; ++i) {
        SamplingState* state = i == 0 ? &s->sampling : &s->draft_states[i - 1];
        rows.host.push_back(SamplerRow{s->group->req.params.get(), state,
                                       s->guided ? s->guided_mask.data() + i * words : nullptr});
        host_seqs.push_back(s);
        host_idx.push_back(batch.logits_indices[j + i]);
        host_seq.push_back(k);
      }
      j += m - 1;
      continue;
    }
    if (s->group->beam) {
      rows.beam.push_back(s);
      beam_idx.push_back(li);
      beam_seq.push_back(k);
      continue;
    }
    SamplerRow r{s->group->req.params.get(), &s->sampling};
    if (s->guided) {  // grammar rows sample on the CPU (gpu_sampling_supported refuses a mask)
      s->guided_mask.resize(s->guided->mask_words());
      s->guided->fill_mask(s->guided_mask);
      r.allowed_mask = s->guided_mask.data();
    }
    if (device_ok && gpu_sampling_supported(r, cfg_.max_log_probs)) {
      rows.device.push_back(r);
      rows.sampled.push_back(s);
      device_idx.push_back(li);
      device_seq.push_back(k);
    } else {
      rows.host.push_back(r);
      host_seqs.push_back(s);
      host_idx.push_back(li);
      host_seq.push_back(k);
    }
  }
  rows.sampled.insert(rows.sampled.end(), host_seqs.begin(), host_seqs.end());
  batch.logits_indices = device_idx;
  batch.logits_indices.insert(batch.logits_indices.end(), host_idx.begin(), host_idx.end());
  batch.logits_indices.insert(batch.logits_indices.end(), beam_idx.begin(), beam_idx.end());
  batch.sampled_seqs = device_seq;
  batch.sampled_seqs.insert(batch.sampled_seqs.end(), host_seq.begin(), host_seq.end());
  batch.sampled_seqs.insert(batch.sampled_seqs.end(), beam_seq.begin(), beam_seq.end());

  // Prompt logprobs: the rows of scheduled prompt positions whose next token is also in the
  // prompt (row p predicts prompt token p + 1). They follow the sampled rows.
  for (size_t k = 0; k < so.scheduled.size(); ++k) {
    const auto& sr = so.scheduled[k];
    auto it = seqs_.find(sr.request->request_id());
    if (it == seqs_.end() || !it->second->group->req.params->prompt_logprobs || it->second->index != 0) continue;
    Seq* s = it->second;
    const int32_t last_prompt_pos = sr.request->num_prompt_tokens() - 2;  // the last row with a prompt target
    const int32_t first = std::max<int32_t>(sr.num_computed_tokens, static_cast<int32_t>(s->prompt_logprobs_done));
    const int32_t last = std::min<int32_t>(sr.num_computed_tokens + sr.num_scheduled_tokens - 1, last_prompt_pos);
    if (first > last) continue;
    for (int32_t pos = first; pos <= last; ++pos) {
      batch.logits_indices.push_back(batch.query_start_loc[k] + pos - sr.num_computed_tokens);
    }
    rows.prompt.push_back(StepRows::Prompt{s, first, last - first + 1});
  }
  return rows;
}

void RequestTracker::take_host_rows(const StepRows& rows, const Logits& host) {
  if (host.rows != static_cast<int64_t>(rows.num_host_rows())) {
    throw std::logic_error(fmt::format("{} host logits rows for {} planned", host.rows, rows.num_host_rows()));
  }
  // Verification by the general rules needs the target's distribution of each drafted position.
  const size_t V = static_cast<size_t>(cfg_.vocab_size);
  const size_t num_device = rows.device.size();
  for (size_t r = 0; r < rows.host.size();) {
    Seq& s = *rows.sampled[num_device + r];
    if (s.drafts.empty()) {
      ++r;
      continue;
    }
    const size_t m = s.drafts.size() + 1;
    const SamplingParams& p = *s.group->req.params;
    s.target_probs.clear();
    s.target_logits.clear();
    s.mirostat_mu_before.clear();
    if (p.mirostat_mode == 2 && p.temperature != 0.0f) {
      // Mirostat: row i is drawn with the mu it would have had after the drafts before it, which
      // follows from the target's rows before it and the drafts alone (not from their draws).
      s.mirostat_mu_before.push_back(s.sampling.mirostat_mu());
      for (size_t i = 1; i < m; ++i) {
        const SamplerRow& prev = rows.host[r + i - 1];
        const float mu = sampler_.mirostat_mu_after({host.row(static_cast<int64_t>(r + i - 1)), V}, p, *prev.state,
                                                    s.drafts[i - 1], prev.allowed_mask);
        rows.host[r + i].state->set_mirostat_mu(mu);
        s.mirostat_mu_before.push_back(mu);
      }
    }
    const bool general = p.temperature != 0.0f && (cfg_.spec_acceptance == SpecAcceptance::Typical ||
                                                   s.draft_probs.size() >= s.drafts.size() * V);
    if (general) {
      for (size_t i = 0; i < m; ++i) {
        const float* row = host.row(static_cast<int64_t>(r + i));
        s.target_logits.insert(s.target_logits.end(), row, row + V);
        if (i + 1 == m) break;  // the bonus position is the sampler's own draw
        SamplingState st = *rows.host[r + i].state;
        const std::vector<float> probs = sampler_.probabilities({row, V}, p, st, rows.host[r + i].allowed_mask);
        s.target_probs.insert(s.target_probs.end(), probs.begin(), probs.end());
      }
    }
    r += m;
  }
  int64_t row = static_cast<int64_t>(rows.host.size());  // the first beam row
  for (Seq* s : rows.beam) take_beam_row(*s, host.row(row++));
  for (const auto& pr : rows.prompt) {
    const auto prompt = pr.seq->req->prompt_token_ids();
    const auto next = prompt.subspan(static_cast<size_t>(pr.first_pos) + 1, static_cast<size_t>(pr.count));
    const int num_top = std::min(*pr.seq->group->req.params->prompt_logprobs, cfg_.max_log_probs);
    const auto lps = prompt_logprobs(host.row(row), static_cast<int32_t>(host.vocab), next, num_top);
    for (size_t i = 0; i < lps.size(); ++i) {
      PositionLogprobs lp;
      lp.token_id = next[i];
      lp.logprob = lps[i].logprob;
      lp.rank = lps[i].rank;
      lp.top = lps[i].top_logprobs;
      pr.seq->pending_prompt_logprobs.push_back(std::move(lp));
    }
    pr.seq->prompt_logprobs_done = static_cast<size_t>(pr.first_pos + pr.count);
    row += pr.count;
  }
}

bool RequestTracker::may_speculate(const std::string& request_id) {
  auto it = seqs_.find(request_id);
  if (it == seqs_.end()) return false;
  Seq& s = *it->second;
  if (s.finished || s.group->beam) return false;
  if (s.spec_pause > 0) {
    --s.spec_pause;
    return false;
  }
  return true;
}

std::vector<int32_t> RequestTracker::trim_drafts(const std::string& request_id, std::vector<int32_t> drafts) {
  auto it = seqs_.find(request_id);
  if (it == seqs_.end() || !it->second->guided) return drafts;
  guided::GuidedMatcher& m = *it->second->guided;
  size_t kept = 0, accepted = 0;
  while (kept < drafts.size()) {
    const bool ok = m.accept(drafts[kept++]);
    if (!ok) break;
    ++accepted;
    if (m.terminated()) break;
  }
  m.rollback(accepted);
  drafts.resize(kept);
  return drafts;
}

int32_t RequestTracker::spec_draft_length(const std::string& request_id) const {
  auto it = seqs_.find(request_id);
  return it == seqs_.end() ? 0 : it->second->spec_length.current();
}

const SamplingState* RequestTracker::sampling_state(const std::string& request_id) const {
  auto it = seqs_.find(request_id);
  return it == seqs_.end() ? nullptr : &it->second->sampling;
}

const SamplingParams* RequestTracker::sampling_params(const std::string& request_id) const {
  auto it = seqs_.find(request_id);
  return it == seqs_.end() ? nullptr : it->second->group->req.params.get();
}

void RequestTracker::set_draft_probs(const std::string& request_id, std::vector<float> probs) {
  auto it = seqs_.find(request_id);
  if (it != seqs_.end()) it->second->draft_probs = std::move(probs);
}

std::vector<int32_t> RequestTracker::verify_with_probs(Seq& s, std::span<const SampleOutput> samples) const {
  const size_t V = static_cast<size_t>(cfg_.vocab_size);
  const size_t k = s.drafts.size();
  // Row 0's output position (the sampler appended row 0's own draw already).
  const uint64_t first_pos = s.sampling.output_ids().size() - 1;
  const uint64_t key = s.sampling.stream_key() ^ kVerifyKeyMix;
  std::vector<int32_t> emitted;
  for (size_t i = 0; i < k; ++i) {
    const std::span<const float> p(s.target_probs.data() + i * V, V);
    const int32_t d = s.drafts[i];
    if (cfg_.spec_acceptance == SpecAcceptance::Typical) {
      if (typical_accept(p, d, cfg_.typical_threshold, cfg_.typical_alpha)) {
        emitted.push_back(d);
        continue;
      }
      emitted.push_back(typical_recovered_token(p));
      return emitted;
    }
    const std::span<const float> q(s.draft_probs.data() + i * V, V);
    const RejectionResult res =
        rejection_sample(p, q, d, philox_uniform(key, first_pos + i, 0), philox_uniform(key, first_pos + i, 1));
    emitted.push_back(res.token);
    if (!res.accepted) return emitted;
  }
  emitted.push_back(samples[k].token);  // every draft kept: the bonus token is the target's own draw
  return emitted;
}

// A Seq with drafts: verify them against the target's draws, cut at EOS / stop ids.
StepResult RequestTracker::check_drafts(Seq& s, std::span<SampleOutput> samples) {
  const SamplingParams& p = *s.group->req.params;
  StepResult r;
  r.request_id = s.req->request_id();
  // Each row's own draw, before a verification by the general rules puts its emitted tokens here.
  std::vector<int32_t> own;
  for (const auto& so : samples) own.push_back(so.token);
  const bool mirostat = !s.mirostat_mu_before.empty();
  const SamplingState row0 = mirostat ? s.sampling : SamplingState();  // row 0's state after its draw
  std::vector<int32_t> targets;
  if (s.target_probs.empty()) {
    // Point-mass drafts (prompt lookup) or a greedy row: the rule is "keep while the draw equals the draft".
    for (const auto& so : samples) targets.push_back(so.token);
    targets.resize(static_cast<size_t>(verify_point_mass_drafts(s.drafts, targets)));
  } else {
    targets = verify_with_probs(s, samples);
    // The emitted token of row 0 replaces the sampler's own draw in the history.
    s.sampling.rewind(1);
    s.sampling.append(targets[0]);
    const int num_top = p.logprobs ? std::min(*p.logprobs, cfg_.max_log_probs) : 0;
    const size_t V = static_cast<size_t>(cfg_.vocab_size);
    for (size_t e = 0; e < targets.size(); ++e) {
      if (samples[e].token == targets[e]) continue;
      samples[e] = token_logprobs({s.target_logits.data() + e * V, V}, targets[e], num_top);
      if (!p.logprobs) samples[e].rank = 0;
    }
  }
  const int32_t n = static_cast<int32_t>(targets.size());
  s.spec_length.update(static_cast<int32_t>(s.drafts.size()), n - 1);
  spec_.draft_tokens += static_cast<int64_t>(s.drafts.size());
  spec_.accepted_tokens += n - 1;
  spec_.emitted_tokens += n;
  spec_.verifications++;
  // Back-off: half-life of one verification; under 1 in 8 drafts accepted, pause.
  s.spec_acceptance = 0.5 * s.spec_acceptance + 0.5 * double(n - 1) / double(s.drafts.size());
  if (s.spec_acceptance < kMinSpecAcceptance) {
    s.spec_pause = kSpecPauseSteps;
    s.spec_acceptance = 0.5;
  }
  // The emitted run, token by token as without speculation: EOS / stop ids, the grammar, banned
  // strings (a token that completes a banned phrase ends the run there and is not appended: the
  // rewind in emit_outputs goes back to where the phrase began, as it would without drafts).
  for (int32_t e = 0; e < n && !is_finished(r.finish); ++e) {
    const int32_t tok = targets[static_cast<size_t>(e)];
    r.sampled_token_ids.push_back(tok);
    if (e > 0) s.sampling.append(tok);  // the first was appended by the sampler (row 0's state)
    const int64_t num_out = s.req->num_output_tokens() + e + 1;
    if (num_out >= p.min_tokens) {
      const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), tok) != eos_ids_.end();
      const bool is_stop_id =
          std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
      if ((is_eos && !p.ignore_eos) || is_stop_id) r.finish = RequestStatus::FinishedStopped;
    }
    if (s.guided) {
      if (!s.guided->accept(tok)) {
        LOG_WARN("request {}: guided decoding: token {} is outside the grammar; stopping", r.request_id, tok);
        r.finish = RequestStatus::FinishedStopped;
      } else if (s.guided->terminated()) {
        r.finish = RequestStatus::FinishedStopped;
      }
    }
    if (s.banned) {
      const std::string text = s.detok ? s.detok->push(tok) : std::string();
      if (auto hit = s.banned->push(tok, text)) {
        r.sampled_token_ids.pop_back();
        r.finish = RequestStatus::Running;
        rewinds_.emplace_back(&s, *hit);
        break;
      }
    }
  }
  if (mirostat) {
    // mu after the last token the run appended to the history (a banned phrase's last token
    // included), as the sampler would have left it without speculation.
    const size_t last = r.sampled_token_ids.size() - (rewinds_.empty() || rewinds_.back().first != &s ? 1 : 0);
    const size_t V = static_cast<size_t>(cfg_.vocab_size);
    const int32_t tok = targets[last];
    const SamplingState& row_state = last == 0 ? row0 : s.draft_states[last - 1];
    float mu;
    if (own[last] == tok) {
      mu = row_state.mirostat_mu();  // the sampler's update for its own draw
    } else if (last + 1 < s.mirostat_mu_before.size() && tok == s.drafts[last]) {
      mu = s.mirostat_mu_before[last + 1];
    } else {
      // A residual or recovered token (general rules only, so the row's logits were kept).
      SamplingState before = row_state;
      before.rewind(1);
      before.set_mirostat_mu(s.mirostat_mu_before[last]);
      const uint32_t* mask = s.guided ? s.guided_mask.data() + last * s.guided->mask_words() : nullptr;
      mu = sampler_.mirostat_mu_after({s.target_logits.data() + last * V, V}, p, before, tok, mask);
    }
    s.sampling.set_mirostat_mu(mu);
  }
  num_generated_tokens_ += static_cast<int64_t>(r.sampled_token_ids.size());
  return r;
}

std::vector<StepResult> RequestTracker::check_sampled(const StepRows& rows, std::span<SampleOutput> samples) {
  std::vector<StepResult> results;
  rewinds_.clear();
  for (size_t i = 0; i < rows.sampled.size(); ++i) {
    Seq& s = *rows.sampled[i];
    if (!s.drafts.empty()) {
      results.push_back(check_drafts(s, samples.subspan(i, s.drafts.size() + 1)));
      i += s.drafts.size();
      continue;
    }
    const SamplingParams& p = *s.group->req.params;
    StepResult r;
    r.request_id = s.req->request_id();
    const int32_t tok = samples[i].token;
    r.sampled_token_ids = {tok};
    num_generated_tokens_++;
    const int64_t num_out = s.req->num_output_tokens() + 1;
    if (num_out >= p.min_tokens) {
      const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), tok) != eos_ids_.end();
      const bool is_stop_id =
          std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
      if ((is_eos && !p.ignore_eos) || is_stop_id) r.finish = RequestStatus::FinishedStopped;
    }
    if (s.guided) {
      if (!s.guided->accept(tok)) {
        // Only when the mask left nothing (min_tokens banning the only way to end): stop here.
        LOG_WARN("request {}: guided decoding: token {} is outside the grammar; stopping", r.request_id, tok);
        r.finish = RequestStatus::FinishedStopped;
      } else if (s.guided->terminated()) {
        r.finish = RequestStatus::FinishedStopped;  // the grammar is complete: nothing else may follow
      }
    }
    // banned_strings: a token that completes a banned phrase is not appended; its sequence rewinds.
    if (s.banned && !s.finished) {
      const std::string text = s.detok ? s.detok->push(tok) : std::string();
      if (auto hit = s.banned->push(tok, text)) {
        r.sampled_token_ids.clear();
        r.finish = RequestStatus::Running;
        rewinds_.emplace_back(&s, *hit);
      }
    }
    results.push_back(std::move(r));
  }
  return results;
}

void RequestTracker::emit_outputs(const StepRows& rows, std::span<const SampleOutput> samples,
                                  std::span<const RequestUpdate> updates) {
  std::unordered_map<const Request*, const RequestUpdate*> update_of;
  for (const auto& u : updates) update_of[u.request.get()] = &u;

  // Group the deltas per client request.
  std::unordered_map<Group*, RequestOutput> outs;
  std::vector<Group*> order;
  auto out_for = [&](Group& g) -> RequestOutput& {
    if (!outs.count(&g)) order.push_back(&g);
    return outs[&g];
  };
  // banned_strings: sequences whose step ended in a banned phrase rewind after their tokens of the
  // step (a verified run can bring tokens before the phrase's last one); until then nothing of
  // theirs is released.
  std::unordered_set<const Seq*> rewinding;
  for (const auto& [s, hit] : rewinds_) rewinding.insert(s);
  for (size_t i = 0, span = 1; i < rows.sampled.size(); i += span) {
    Seq& s = *rows.sampled[i];
    span = s.drafts.size() + 1;  // the verified positions of a Seq with drafts, else its one row
    if (s.finished) continue;    // aborted meanwhile
    auto found = update_of.find(s.req.get());
    if (found == update_of.end() || found->second->new_token_ids.empty()) continue;
    const RequestUpdate* uit = found->second;
    Group& g = *s.group;
    RequestOutput& out = out_for(g);
    if (g.num_cached_prompt_tokens == 0 && s.req->num_cached_tokens() > 0) {
      g.num_cached_prompt_tokens = s.req->num_cached_tokens();
    }
    const SamplingParams& p = *g.req.params;
    // One token per step, or the verified run of a Seq with drafts (token t from row i + t, whose
    // logprobs are the target's at that position); a stop string may end it early.
    for (size_t t = 0; t < uit->new_token_ids.size() && t < span && !s.finished; ++t) {
      const SampleOutput& so_i = samples[i + t];
      s.cumulative_logprob += so_i.logprob;
      std::optional<PositionLogprobs> lp;
      if (p.logprobs) {
        lp.emplace();
        lp->token_id = so_i.token;
        lp->logprob = so_i.logprob;
        lp->rank = so_i.rank;
        for (const auto& tl : so_i.top_logprobs) lp->top.push_back(TokenLogprob{tl.token_id, tl.logprob});
      }
      const int32_t tok = uit->new_token_ids[t];
      if (s.banned) {
        s.cumulative_at.push_back(s.cumulative_logprob);
        if (lp) s.held_logprobs.push_back(std::move(*lp));
        if (!rewinding.count(&s)) release_banned(s, /*all=*/uit->finished(), out);
      } else {
        const std::string text = s.detok ? s.detok->push(tok) : std::string();
        emit_token(s, tok, text, lp ? &*lp : nullptr, out);
      }
    }
    const int32_t tok = uit->new_token_ids.back();
    if (!s.finished && uit->finished()) {
      const bool stopped = uit->status == RequestStatus::FinishedStopped;
      CompletionDelta& d = out.delta(s.index);
      if (stopped && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end()) {
        d.stop_reason = std::to_string(tok);
      }
      finish_seq(s, stopped ? "stop" : uit->status == RequestStatus::FinishedLength ? "length" : "abort", out);
    }
  }
  for (auto& [s, hit] : rewinds_) {
    if (!s->finished) rewind_banned(*s, hit, out_for(*s->group));
  }
  rewinds_.clear();
  // Beam-search requests step once every running beam has its row.
  std::vector<Group*> beam_groups;
  for (Seq* s : rows.beam) {
    if (std::find(beam_groups.begin(), beam_groups.end(), s->group) == beam_groups.end()) {
      beam_groups.push_back(s->group);
    }
  }
  for (Group* g : beam_groups) {
    if (!g->beam->done) advance_beam(*g, out_for(*g));
  }
  for (Group* g : order) emit(*g, outs[g]);  // erases the finished groups
}

void RequestTracker::fail_step(const SchedulerOutput& so, const std::string& error) {
  for (const auto& sr : so.scheduled) {
    auto it = seqs_.find(sr.request->request_id());
    if (it == seqs_.end()) continue;
    fail_group(*it->second->group, fmt::format("the model step failed: {}", error));
  }
}

}  // namespace cypris
