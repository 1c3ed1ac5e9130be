// The request tracker's per-request state (private to request_tracker*.cpp). A client
// request is a Group of Seqs; each Seq is one scheduler Request with its sampler state, streaming
// detokenizer, stop-string matcher and banned-string matcher. Beam search keeps its beams as Seqs
// too, plus a BeamState.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/request_tracker.h"
#include "engine/guided/guided_decoding.h"
#include "engine/request/request.h"
#include "engine/request/sampling_params.h"
#include "engine/sampling/banned_strings.h"
#include "engine/sampling/beam_search.h"
#include "engine/sampling/sampler.h"
#include "engine/spec/adaptive_draft_length.h"
#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/stop_strings.h"

namespace cypris {

// One of a request's n (or best_of) sequences, or one beam.
struct RequestTracker::Seq {
  Group* group = nullptr;
  int index = 0;  // output index; for a beam, a number that names its scheduler request
  std::shared_ptr<Request> req;
  SamplingState sampling;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopStringMatcher> stops;
  double cumulative_logprob = 0.0;
  size_t prompt_logprobs_done = 0;  // prompt positions whose logprobs were sent (recompute repeats them)
  std::vector<PositionLogprobs> pending_prompt_logprobs;
  bool finished = false;
  // Accumulated for best_of > n, where only the best n are returned at the end.
  CompletionDelta all;

  // banned_strings (null without): the output passes through this matcher first; tokens (and their
  // text and logprobs) reach the stop-string matcher and the client only once no banned phrase
  // can begin in them.
  std::unique_ptr<BannedStringMatcher> banned;
  // Structured output (null without): advanced with every sampled token, rolled back with rewinds.
  std::unique_ptr<guided::GuidedMatcher> guided;
  // This step's allowed-token bits: one row's, or with drafts one per verified position ([drafts
  // + 1, mask words], each from the matcher advanced over the drafts before it).
  std::vector<uint32_t> guided_mask;
  size_t banned_sent_tokens = 0;               // output tokens passed on
  std::deque<PositionLogprobs> held_logprobs;  // of the tokens not passed on yet (when asked for)
  std::vector<double> cumulative_at;           // cumulative logprob after each output token
  int num_rewinds = 0;

  // Speculative decoding: this step's drafts (empty without), and the sampler state of each
  // verified position after the first: `sampling` with drafts[0..i] appended, so penalties see the
  // history up to that position and the draw uses that position's Philox counter.
  std::vector<int32_t> drafts;
  std::vector<SamplingState> draft_states;
  // Back-off when guesses fail: a moving average of the accepted fraction of drafts; below
  // RequestTracker's floor the sequence decodes without drafts for a while.
  double spec_acceptance = 1.0;
  int spec_pause = 0;               // steps left without drafts
  AdaptiveDraftLength spec_length;  // how many tokens to draft next
  // A draft model's q of each drafted position ([proposed, vocab]; empty for prompt lookup), and
  // for a verification by the general rules the target's p of each drafted position ([drafts,
  // vocab]) and raw logits of each verified one ([drafts + 1, vocab], for logprobs).
  std::vector<float> draft_probs;
  std::vector<float> target_probs;
  std::vector<float> target_logits;
  // Mirostat: each verified position's mu before its draw (the mu after the drafts before it).
  std::vector<float> mirostat_mu_before;
};

// Beam search for one request (beam width = best_of): the search itself, the Seq of each running
// beam (in search.running() order) and the next-token rows gathered for them. The search steps
// once every running beam has its row; beams that got theirs wait (idle in the scheduler).
struct RequestTracker::BeamState {
  explicit BeamState(BeamSearchConfig config) : search(std::move(config)) {}
  BeamSearch search;
  std::vector<Seq*> running;
  std::vector<float> logprobs;          // [running.size(), vocab]: beam_logprobs() of each running beam
  std::vector<std::vector<float>> raw;  // raw logits of each running beam (only with `logprobs`)
  std::vector<char> ready;
  int next_index = 1;
  bool done = false;
};

// One client request.
struct RequestTracker::Group {
  GenerateRequest req;
  std::shared_ptr<RequestStream> stream;
  std::vector<std::unique_ptr<Seq>> seqs;
  int n = 1;
  bool hold_until_done = false;  // best_of > n
  int num_finished = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_prompt_tokens = 0;
  int64_t num_generated = 0;
  bool first_output_sent = false;
  std::shared_ptr<const BannedStrings> banned;  // null without banned_strings
  uint64_t seed = 0;                            // the request's seed, or the engine's draw for a request without one
  std::unique_ptr<BeamState> beam;              // null unless use_beam_search
  bool done() const { return beam ? beam->done : num_finished == static_cast<int>(seqs.size()); }
};

}  // namespace cypris
