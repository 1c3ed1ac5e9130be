// Engine: one step of continuous batching, as the design reads:
//   schedule -> runner.execute -> sampler -> scheduler.update_from_output -> outputs.
// It owns the model runner, scheduler, sampler and tokenizer; front ends use AsyncEngine
// (async_engine.h), which runs an Engine on its own thread. Not thread-safe by itself.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/common/tensor.h"
#include "engine/config/engine_config.h"
#include "engine/core/engine_client.h"
#include "engine/request/outputs.h"
#include "engine/core/stats.h"

namespace cypris {

class IncrementalDetokenizer;
class ModelRunner;
class Scheduler;
struct BannedStringHit;
struct SamplingParams;
class Sampler;
class Tokenizer;
struct SchedulerOutput;

class Engine {
 public:
  // Loads the tokenizer and the model named by cfg.model.model (a local folder; a Hugging Face
  // repo id is looked up in the local cache) and sizes the KV cache. Throws Error on bad input.
  explicit Engine(const EngineConfig& cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request; its outputs go to stream. Throws Error (for the client)
  // when the request can never run.
  void add_request(GenerateRequest req, std::shared_ptr<RequestStream> stream);
  // Ends a request; its stream gets a last output with finish_reason "abort". Unknown ids are
  // ignored (the request may have just finished).
  void abort_request(const std::string& request_id);

  bool has_unfinished_requests() const;
  // One scheduler step. Pushes output deltas to the streams of the requests that ran.
  void step();

  EngineStats stats() const;
  ModelInfo model_info() const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  int64_t num_kv_blocks() const;
  // Every named intermediate of each forward pass goes to hook (debug dumps).
  void set_debug_hook(std::function<void(const std::string&, const Tensor&)> hook);

 private:
  // engine_state.h
  struct Seq;
  struct Group;
  struct BeamState;

  std::unique_ptr<IncrementalDetokenizer> make_detokenizer(const SamplingParams& p,
                                                           std::span<const int32_t> prompt) const;
  void finish_seq(Seq& seq, const std::string& reason, RequestOutput& out);
  void emit(Group& g, RequestOutput& out);
  // Ends every sequence of the request; the client gets `error` (or finish_reason abort without).
  void fail_group(Group& g, std::optional<std::string> error);
  // The same without sending: the ended sequences go into out.
  void end_group(Group& g, std::optional<std::string> error, RequestOutput& out);
  // One output token (text already past the banned-strings hold) to the stop strings and the
  // client's delta. True when a stop string ended the sequence.
  bool emit_token(Seq& s, int32_t token, std::string_view text, PositionLogprobs* logprobs, RequestOutput& out);
  // banned_strings: passes on the tokens that are safe now (all of them when `all`).
  void release_banned(Seq& s, bool all, RequestOutput& out);
  // banned_strings: the sampled token completed a banned phrase (it was not appended).
  void rewind_banned(Seq& s, const BannedStringHit& hit, RequestOutput& out);

  // Beam search (engine_beam.cpp).
  void add_beam_request(Group& g, const std::shared_ptr<SamplingParams>& params, double now);
  void take_beam_row(Seq& s, const float* logits);
  // Steps the search once every running beam has its row; forks and drops beams to match.
  void advance_beam(Group& g, RequestOutput& out);
  void drop_beam(Seq& s);
  void finish_beam(Group& g, const std::string& reason, RequestOutput& out);

  EngineConfig cfg_;
  ModelInfo info_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<int32_t> eos_ids_;
  std::unordered_map<std::string, std::unique_ptr<Group>> groups_;  // by client request id
  std::unordered_map<std::string, Seq*> seqs_;                      // by scheduler request id

  // Throughput over the last stats() interval.
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  int64_t swap_outs_total_ = 0;
  mutable int64_t last_prompt_tokens_ = 0;
  mutable int64_t last_generation_tokens_ = 0;
  mutable std::chrono::steady_clock::time_point last_stats_time_ = std::chrono::steady_clock::now();
  mutable double prompt_rate_ = 0.0;
  mutable double generation_rate_ = 0.0;
};

}  // namespace cypris
