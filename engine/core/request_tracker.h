// RequestTracker: the engine's per-request bookkeeping, apart from the step itself. A client
// request is a Group of Seqs (its n / best_of sequences, or its beams); each Seq is one scheduler
// Request with its sampler state, streaming detokenizer, stop-string matcher and banned-string
// matcher (request_state.h). Around one step (engine.cpp):
//   plan_rows      which logits rows the step computes and where each is sampled (GPU sampler, CPU
//                  sampler, beam search, prompt logprobs), written into the batch;
//   take_host_rows the beam-search and prompt-logprob rows of the downloaded logits;
//   check_sampled  EOS / stop ids and banned-string hits -> the scheduler's StepResults;
//   emit_outputs   the scheduler's updates -> detokenized, stop-checked deltas per client request,
//                  best_of grouping, beam steps, pushed to the streams.
// Beam search lives in request_tracker_beam.cpp. Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/config/engine_config.h"
#include "engine/core/engine_client.h"
#include "engine/request/outputs.h"
#include "engine/sampling/banned_strings.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/scheduler_output.h"
#include "engine/spec/spec_config.h"

namespace cypris {
namespace guided {
class GuidedDecoder;
class GuidedMatcher;
}  // namespace guided

class IncrementalDetokenizer;
class Scheduler;
class Tokenizer;
struct Logits;

// What the tracker needs to know about the engine.
struct TrackerConfig {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  int max_log_probs = 0;     // --max-log-probs
  int64_t max_num_seqs = 0;  // --max-num-seqs (bounds the beam width)
  LoggingOptions logging;
  std::string guided_backend;   // --guided-decoding-backend (named in the log; our engine runs)
  bool spec_decode = false;     // --speculative-model: beam-search requests are refused
  int32_t spec_num_tokens = 1;  // --num-speculative-tokens: the longest draft (adaptive below it)
  SpecAcceptance spec_acceptance = SpecAcceptance::Rejection;
  double typical_threshold = 0.09;  // --typical-acceptance-sampler-posterior-threshold
  double typical_alpha = 0.3;       // --typical-acceptance-sampler-posterior-alpha
  uint64_t seed = 0;                // --seed: seeds the generator that requests without a seed draw theirs from
};

struct StepRows;

// Gives a scheduler request its LoRA slot and the cache salt of its adapter (none: slot -1, salt 0).
void set_lora(Request& r, const GenerateRequest& req);

class RequestTracker {
 public:
  struct Seq;  // request_state.h
  struct Group;
  struct BeamState;

  RequestTracker(const TrackerConfig& config, Scheduler& scheduler, Sampler& sampler, const Tokenizer* tokenizer,
                 std::vector<int32_t> eos_ids);
  ~RequestTracker();
  RequestTracker(const RequestTracker&) = delete;
  RequestTracker& operator=(const RequestTracker&) = delete;

  // Validates and queues a request (Engine::add_request). Throws Error when it can never run.
  void add(GenerateRequest req, std::shared_ptr<RequestStream> stream);
  // Ends a request with finish_reason "abort"; unknown ids are ignored.
  void abort(const std::string& request_id);
  bool has_unfinished() const { return !groups_.empty(); }
  // Whether an unfinished request (waiting or running) names the LoRA adapter with this id.
  bool uses_lora(uint64_t lora_id) const;
  // The LoRA adapter id of a scheduler request (0: the base model, or an unknown id).
  uint64_t lora_id_of(const std::string& request_id) const;
  // Output tokens produced so far (sampled, or ranked by the beam search).
  int64_t num_generated_tokens() const { return num_generated_tokens_; }
  // Speculative decoding: whether the request gets drafts this step (call once per step for a
  // request about to decode). Never for beam search; not for a while after its recent drafts were
  // mostly rejected (verifying them costs compute and gains nothing).
  bool may_speculate(const std::string& request_id);
  // The proposed drafts cut to those worth verifying: with guided decoding, after the first draft
  // the grammar rejects (it is verified and cannot be accepted: the target draws there from its
  // masked distribution) or after the one that completes the grammar.
  std::vector<int32_t> trim_drafts(const std::string& request_id, std::vector<int32_t> drafts);
  // How many tokens to draft for the request this step: --num-speculative-tokens, shrunk while its
  // drafts are mostly rejected and grown back while they are all accepted (AdaptiveDraftLength).
  int32_t spec_draft_length(const std::string& request_id) const;
  // A draft model's inputs: the request's sampler state (history, Philox key) and parameters; null
  // for an unknown id.
  const SamplingState* sampling_state(const std::string& request_id) const;
  const SamplingParams* sampling_params(const std::string& request_id) const;
  // A draft model's distribution q of each drafted position ([drafts, vocab]) for this step's
  // verification by rejection sampling; empty for drafts that are a point mass (prompt lookup).
  void set_draft_probs(const std::string& request_id, std::vector<float> probs);
  // Totals since start: drafted tokens verified, drafts accepted, tokens emitted by steps that
  // verified drafts, and such verification groups (one per request per step).
  struct SpecCounters {
    int64_t draft_tokens = 0;
    int64_t accepted_tokens = 0;
    int64_t emitted_tokens = 0;
    int64_t verifications = 0;
  };
  const SpecCounters& spec_counters() const { return spec_; }

  // Orders the batch's logits rows as StepRows says (reorders logits_indices and sampled_seqs,
  // appends the prompt-logprob rows). device_ok: the runner can sample on its device; a row goes
  // there when gpu_sampling_supported says it may.
  StepRows plan_rows(const SchedulerOutput& so, BatchContext& batch, bool device_ok);
  // host: the downloaded rows [host rows, beam rows, prompt rows] of the step. Call it before the
  // CPU sampler draws the host rows: verification by the general rules (a draft model's drafts,
  // typical acceptance) needs the target's sampling distribution of each verified position with
  // the history before that position.
  void take_host_rows(const StepRows& rows, const Logits& host);
  // One StepResult per sampled row (samples in StepRows::sampled order): EOS and stop ids end the
  // sequence; a token that completes a banned phrase is not appended (its rewind follows in
  // emit_outputs), and with drafts ends the verified run there. A verified position that emits another token than its row's own draw (a draft
  // accepted by rejection sampling, a residual draw) gets that token's logprobs in `samples`.
  std::vector<StepResult> check_sampled(const StepRows& rows, std::span<SampleOutput> samples);
  // The scheduler's updates to the clients: tokens through the banned-strings hold, the detokenizer
  // and the stop strings; finished sequences; best_of and beam-search grouping; prompt logprobs.
  void emit_outputs(const StepRows& rows, std::span<const SampleOutput> samples,
                    std::span<const RequestUpdate> updates);
  // A failed model step fails every request it scheduled (the engine keeps serving the others).
  void fail_step(const SchedulerOutput& so, const std::string& error);

 private:
  std::unique_ptr<IncrementalDetokenizer> make_detokenizer(const SamplingParams& p,
                                                           std::span<const int32_t> prompt) const;
  // Structured output: the matcher of one sequence (throws cypris::Error for bad grammars).
  std::unique_ptr<guided::GuidedMatcher> make_guided_matcher(const SamplingParams& p);
  void finish_seq(Seq& seq, const std::string& reason, RequestOutput& out);
  void emit(Group& g, RequestOutput& out);
  // Ends every sequence of the request; the client gets `error` (or finish_reason abort without).
  void fail_group(Group& g, std::optional<std::string> error);
  // The same without sending: the ended sequences go into out.
  void end_group(Group& g, std::optional<std::string> error, RequestOutput& out);
  // One output token (text already past the banned-strings hold) to the stop strings and the
  // client's delta. True when a stop string ended the sequence.
  bool emit_token(Seq& s, int32_t token, std::string_view text, PositionLogprobs* logprobs, RequestOutput& out);
  // Speculative decoding: the verified run of a Seq with drafts (samples: its drafts.size() + 1 rows).
  StepResult check_drafts(Seq& s, std::span<SampleOutput> samples);
  // The emitted tokens of a verification by rejection sampling or typical acceptance (Seq::target_probs).
  std::vector<int32_t> verify_with_probs(Seq& s, std::span<const SampleOutput> samples) const;
  // banned_strings: passes on the tokens that are safe now (all of them when `all`).
  void release_banned(Seq& s, bool all, RequestOutput& out);
  // banned_strings: the sampled token completed a banned phrase (it was not appended).
  void rewind_banned(Seq& s, const BannedStringHit& hit, RequestOutput& out);

  // Beam search (request_tracker_beam.cpp).
  void add_beam_request(Group& g, const std::shared_ptr<SamplingParams>& params, double now);
  void take_beam_row(Seq& s, const float* logits);
  // Steps the search once every running beam has its row; forks and drops beams to match.
  void advance_beam(Group& g, RequestOutput& out);
  void drop_beam(Seq& s);
  void finish_beam(Group& g, const std::string& reason, RequestOutput& out);

  TrackerConfig cfg_;
  // Requests without their own seed take the next draw of this generator, seeded once by --seed
  // (vLLM): a fresh server given the same requests in the same order gives the same outputs.
  std::mt19937_64 unseeded_rng_;
  Scheduler& scheduler_;
  Sampler& sampler_;
  const Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
  std::unordered_map<std::string, std::unique_ptr<Group>> groups_;  // by client request id
  std::unordered_map<std::string, Seq*> seqs_;                      // by scheduler request id
  // banned_strings hits of the step between check_sampled and emit_outputs.
  std::vector<std::pair<Seq*, BannedStringHit>> rewinds_;
  int64_t num_generated_tokens_ = 0;
  // The last request's parameters as add() prepared them (validated copy, banned-string
  // automaton): the next prompt of the same client request (the same params object) reuses them.
  struct Prepared {
    std::shared_ptr<const SamplingParams> source;
    std::shared_ptr<SamplingParams> params;
    std::shared_ptr<const BannedStrings> banned;
  };
  Prepared prepared_;
  SpecCounters spec_;
  // Structured output (engine/guided): made on the first request that asks for it.
  std::unique_ptr<guided::GuidedDecoder> guided_;
};

// Where the logits rows of one step go, in logits-row order: the GPU-sampled rows, the
// CPU-sampled rows, the beam-search rows, the prompt-logprob rows. The engine samples the first
// two kinds; take_host_rows takes the others.
struct StepRows {
  std::vector<SamplerRow> device;             // sampled where the logits are (GPU sampler)
  std::vector<SamplerRow> host;               // sampled by the CPU sampler
  // The Seq of each device row, then of each host row; a Seq with drafts (Seq::drafts) has its
  // drafts.size() + 1 verified positions as consecutive host rows.
  std::vector<RequestTracker::Seq*> sampled;
  std::vector<RequestTracker::Seq*> beam;     // one row each
  struct Prompt {
    RequestTracker::Seq* seq;
    int32_t first_pos;  // prompt position of the first row
    int32_t count;
  };
  std::vector<Prompt> prompt;
  size_t num_host_rows() const;  // rows downloaded: host + beam + prompt
};

}  // namespace cypris
