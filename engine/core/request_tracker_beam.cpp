// Beam search in the request tracker. Each beam is a scheduler request ("<id>#beam<k>"). A beam that got
// its next-token row waits, idle, until every running beam of its request has one; then the
// search steps once (engine/sampling/beam_search.h), and the beams are matched to the new
// hypotheses: the first continuation of a beam keeps its request, further ones fork it (shared KV
// blocks, copy-on-write), beams without continuation end. Nothing streams: the best n hypotheses
// are sent when the search ends, detokenized and cut at the first stop string.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "engine/common/error.h"
#include "engine/core/request_state.h"
#include "engine/core/request_tracker.h"
#include "engine/scheduler/scheduler.h"

namespace cypris {

void RequestTracker::add_beam_request(Group& g, const std::shared_ptr<SamplingParams>& params, double now) {
  const auto& prompt = g.req.prompt_token_ids;
  std::optional<int32_t> eos;
  if (!eos_ids_.empty()) eos = eos_ids_.front();
  BeamSearchConfig bc = BeamSearchConfig::from_params(*params, static_cast<int>(prompt.size()),
                                                      static_cast<int>(cfg_.max_model_len), eos);
  if (!params->ignore_eos) {  // a model may have several EOS ids; each ends a hypothesis
    for (size_t i = 1; i < eos_ids_.size(); ++i) bc.stop_token_ids.push_back(eos_ids_[i]);
  }
  const int32_t max_tokens = bc.max_tokens;
  g.beam = std::make_unique<BeamState>(std::move(bc));
  auto seq = std::make_unique<Seq>();
  seq->group = &g;
  seq->index = 0;
  const std::string id = fmt::format("{}#beam0", g.req.request_id);
  seq->req = std::make_shared<Request>(id, prompt, max_tokens, params, g.req.priority, now);
  set_lora(*seq->req, g.req);
  seq->sampling = SamplingState(*params, prompt, 0, g.seed);
  if (params->guided.active()) seq->guided = make_guided_matcher(*params);
  scheduler_.add_request(seq->req);
  seqs_[id] = seq.get();
  g.beam->running = {seq.get()};
  g.beam->logprobs.resize(static_cast<size_t>(cfg_.vocab_size));
  g.beam->raw.resize(1);
  g.beam->ready.assign(1, 0);
  g.seqs.push_back(std::move(seq));
}

void RequestTracker::take_beam_row(Seq& s, const float* logits) {
  BeamState& b = *s.group->beam;
  auto it = std::find(b.running.begin(), b.running.end(), &s);
  if (it == b.running.end()) return;
  const size_t slot = static_cast<size_t>(it - b.running.begin());
  const SamplingParams& p = *s.group->req.params;
  const auto vocab = static_cast<size_t>(cfg_.vocab_size);
  sampler_.beam_logprobs(std::span<const float>(logits, vocab), p, s.sampling,
                         std::span<float>(b.logprobs).subspan(slot * vocab, vocab));
  if (s.guided) {  // structured output: tokens outside the grammar cannot extend this beam
    s.guided_mask.resize(s.guided->mask_words());
    s.guided->fill_mask(s.guided_mask);
    float* row = b.logprobs.data() + slot * vocab;
    for (size_t id = 0; id < vocab; ++id)
      if (((s.guided_mask[id >> 5] >> (id & 31)) & 1u) == 0) row[id] = -std::numeric_limits<float>::infinity();
  }
  if (p.logprobs) b.raw[slot].assign(logits, logits + vocab);
  b.ready[slot] = 1;
  num_generated_tokens_++;
}

void RequestTracker::drop_beam(Seq& s) {
  if (s.finished) return;
  scheduler_.abort_request(s.req->request_id());
  s.finished = true;
  seqs_.erase(s.req->request_id());
}

void RequestTracker::advance_beam(Group& g, RequestOutput& out) {
  BeamState& b = *g.beam;
  if (std::find(b.ready.begin(), b.ready.end(), 0) != b.ready.end()) return;
  const auto vocab = static_cast<int32_t>(cfg_.vocab_size);
  const size_t num_beams = b.running.size();
  const SamplingParams& p = *g.req.params;
  std::function<void(int32_t, int32_t, BeamHypothesis&)> extend;
  if (p.logprobs) {
    const int num_top = std::min(*p.logprobs, cfg_.max_log_probs);
    extend = [&b, num_top](int32_t beam, int32_t token, BeamHypothesis& child) {
      const SampleOutput so = token_logprobs(b.raw[static_cast<size_t>(beam)], token, num_top);
      PositionLogprobs lp;
      lp.token_id = token;
      lp.logprob = so.logprob;
      lp.rank = so.rank;
      for (const auto& t : so.top_logprobs) lp.top.push_back(TokenLogprob{t.token_id, t.logprob});
      child.logprobs.push_back(std::move(lp));
    };
  }
  b.search.step(b.logprobs.data(), vocab, extend);

  // Match the old beams' requests to the new hypotheses. Forks first, while the parents' requests
  // still end at the shared position; then the first child of each parent takes its request.
  const auto& next = b.search.running();
  std::vector<int> first_child(num_beams, -1);
  for (size_t j = 0; j < next.size(); ++j) {
    auto& fc = first_child[static_cast<size_t>(next[j].parent)];
    if (fc < 0) fc = static_cast<int>(j);
  }
  std::vector<Seq*> seqs(next.size(), nullptr);
  for (size_t j = 0; j < next.size(); ++j) {
    const auto parent = static_cast<size_t>(next[j].parent);
    if (first_child[parent] == static_cast<int>(j)) continue;
    Seq& from = *b.running[parent];
    auto child = std::make_unique<Seq>();
    child->group = &g;
    child->index = b.next_index++;
    const std::string id = fmt::format("{}#beam{}", g.req.request_id, child->index);
    // Shares the parent's KV blocks; when the scheduler cannot (the parent was preempted, or the
    // batch is full) the child starts as a new request (the prefix cache may still serve it).
    child->req = scheduler_.fork_request(from.req->request_id(), id);
    if (!child->req) {
      child->req = from.req->fork(id);
      scheduler_.add_request(child->req);
    }
    child->sampling = from.sampling;
    if (from.guided) child->guided = from.guided->clone();  // the parent's state, before its own token
    seqs_[id] = child.get();
    seqs[j] = child.get();
    g.seqs.push_back(std::move(child));
  }
  for (size_t j = 0; j < next.size(); ++j) {
    const auto parent = static_cast<size_t>(next[j].parent);
    if (first_child[parent] == static_cast<int>(j)) seqs[j] = b.running[parent];
  }
  for (size_t i = 0; i < num_beams; ++i) {
    if (first_child[i] < 0) drop_beam(*b.running[i]);
  }
  for (size_t j = 0; j < next.size(); ++j) {
    const int32_t token = next[j].tokens.back();
    seqs[j]->req->append_output_token(token);
    seqs[j]->sampling.append(token);
  }
  b.running = std::move(seqs);
  b.logprobs.assign(b.running.size() * static_cast<size_t>(vocab), 0.0f);
  b.raw.assign(b.running.size(), {});
  b.ready.assign(b.running.size(), 0);
  if (b.search.done()) finish_beam(g, "", out);
}

void RequestTracker::finish_beam(Group& g, const std::string& reason, RequestOutput& out) {
  BeamState& b = *g.beam;
  for (auto& s : g.seqs) drop_beam(*s);
  b.running.clear();
  b.done = true;
  if (!reason.empty()) {
    for (int i = 0; i < g.n; ++i) out.delta(i).finish_reason = reason;
    return;
  }
  const SamplingParams& p = *g.req.params;
  const auto best = b.search.best(g.n);
  for (int i = 0; i < g.n; ++i) {
    CompletionDelta& d = out.delta(i);
    if (static_cast<size_t>(i) >= best.size()) {  // every continuation was masked
      d.finish_reason = "stop";
      continue;
    }
    const BeamHypothesis& h = best[static_cast<size_t>(i)];
    d.token_ids = h.tokens;
    d.cumulative_logprob = h.cum_logprob;
    if (p.logprobs) d.logprobs = h.logprobs;
    g.num_generated += static_cast<int64_t>(h.tokens.size());
    const int32_t last = h.tokens.empty() ? -1 : h.tokens.back();
    const bool is_stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), last) != p.stop_token_ids.end();
    const bool is_eos = !p.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), last) != eos_ids_.end();
    d.finish_reason = is_stop_id || is_eos ? "stop" : "length";
    if (is_stop_id) d.stop_reason = std::to_string(last);
    auto detok = make_detokenizer(p, g.req.prompt_token_ids);
    if (!detok) continue;
    std::string text = detok->push(h.tokens);
    text += detok->finish();
    StopStringMatcher stops(p.stop, p.include_stop_str_in_output);
    const StopCheck c = stops.push(text);
    d.text = c.text;
    if (c.stopped()) {
      d.finish_reason = "stop";
      d.stop_reason = p.stop[*c.stop_index];
    } else {
      d.text += stops.flush();
    }
  }
}

}  // namespace cypris
