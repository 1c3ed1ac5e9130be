// Engine: one step of continuous batching, as the design reads:
//   schedule -> runner.execute -> sampler -> scheduler.update_from_output -> outputs.
// It owns the model runner, scheduler, sampler and tokenizer; the per-request bookkeeping
// (detokenizers, stop and banned strings, best_of, beam search, prompt logprobs) is the
// RequestTracker's (request_tracker.h). Front ends use AsyncEngine (async_engine.h), which runs an
// Engine on its own thread. Not thread-safe by itself.
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

class DraftModelProposer;
class LoraTable;
class ModelRunner;
struct LoraAdapter;
class NgramProposer;
class Request;
class RequestTracker;
class Scheduler;
class Sampler;
class SamplingState;
class StepSampler;
class Tokenizer;
struct BatchContext;
struct SampleOutput;
struct SchedulerOutput;
struct StepLogits;
struct StepRows;

// Where step() spends its wall time since the engine started (seconds), for `cypris bench
// throughput`. GPU work is asynchronous: it lands in whichever phase first waits for it (sampling,
// usually), unless CYPRIS_STEP_PROFILE_SYNC=1 in the environment makes the execute phase wait.
struct StepProfile {
  int64_t steps = 0;
  int64_t decode_steps = 0;  // steps without a prompt token
  double schedule = 0;       // scheduler_->schedule()
  double plan = 0;           // block moves and the tracker's row plan
  double execute = 0;        // ModelRunner::execute_step
  double sample = 0;         // GPU and CPU sampling, logits downloads
  double update = 0;         // stop checks, scheduler update, outputs to the streams
  // With pipeline stages (-pp, --gpu-layers): each stage ("layers [0, 3) on cpu") and the seconds it
  // spent running its micro-batches; `pipeline` is the wall time of those forward passes, so
  // busy / pipeline is the stage's utilisation.
  std::vector<std::pair<std::string, double>> stages;
  double pipeline = 0;
};

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
  const StepProfile& step_profile() const { return profile_; }
  ModelInfo model_info() const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  int64_t num_kv_blocks() const;
  // LoRA adapters (--enable-lora; engine_client.h says what each does). add_lora takes an adapter the
  // caller read (load_lora_adapter with max_lora_rank()), checks it against the model, keeps it in
  // host memory and writes it into an empty device slot if there is one (else a request naming it
  // swaps it into the least recently used slot no running request uses, lora_table.h); Error when
  // LoRA is off or the name is the model's or taken.
  bool lora_enabled() const { return lora_ != nullptr; }
  int64_t max_lora_rank() const { return cfg_.lora.max_lora_rank; }
  std::vector<LoraInfo> loras() const;
  // Reads an adapter for this model (load_lora_adapter with --max-lora-rank): a GGUF adapter must be
  // for the model's llama.cpp architecture, and its q/k rows are put back into the model's order.
  // Reads only immutable state: safe from other threads.
  LoraAdapter read_lora(const std::string& path) const;
  void add_lora(const std::string& name, LoraAdapter&& adapter);
  void add_lora(const std::string& name, std::shared_ptr<const LoraAdapter> adapter);
  bool remove_lora(const std::string& name);
  // Device bytes of the loaded adapters' weights (rank 0).
  size_t lora_device_bytes() const;
  // How many times an adapter was written into a device slot for a request (not at load).
  int64_t lora_swaps() const { return lora_swaps_; }

  // A running request's sampler state (history, Philox key, Mirostat's mu), as the last step left
  // it; null once it finished or for an unknown id. For tests and debugging.
  const SamplingState* sampling_state(const std::string& request_id) const;

  // Every named intermediate of each forward pass goes to hook (debug dumps).
  void set_debug_hook(std::function<void(const std::string&, const Tensor&)> hook);

 private:
  // The step's block moves and prompt-token count.
  void prepare(const SchedulerOutput& so);
  // Runs the batch: its logits rows where the forward pass left them (the step's timing profile too).
  StepLogits execute(const BatchContext& batch);
  // Speculative decoding: drafts for the running requests about to decode (the scheduler trims
  // them to its budget and limits), none above --speculative-disable-by-batch-size.
  void propose_drafts();
  // The scheduler's admission check with LoRA: the request's adapter into a device slot (kept,
  // empty, or the least recently used one no running request uses) and its slot set; false when
  // every slot is busy.
  bool place_lora(Request& r);

  EngineConfig cfg_;
  ModelInfo info_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<RequestTracker> tracker_;  // last: refers to the scheduler and the sampler
  std::unique_ptr<StepSampler> step_sampler_;  // refers to the runner, the sampler and the tracker
  std::unique_ptr<NgramProposer> proposer_;  // --speculative-model "[ngram]"
  std::unique_ptr<DraftModelProposer> draft_;  // --speculative-model PATH (refers to the sampler)
  std::unique_ptr<LoraTable> lora_;            // null without --enable-lora
  std::optional<int64_t> spec_disable_by_batch_size_;
  int64_t lora_swaps_ = 0;

  StepProfile profile_;
  bool profile_sync_ = false;  // CYPRIS_STEP_PROFILE_SYNC=1

  // Throughput over the last stats() interval.
  int64_t prompt_tokens_total_ = 0;
  int64_t swap_outs_total_ = 0;
  mutable int64_t last_prompt_tokens_ = 0;
  mutable int64_t last_generation_tokens_ = 0;
  mutable std::chrono::steady_clock::time_point last_stats_time_ = std::chrono::steady_clock::now();
  mutable double prompt_rate_ = 0.0;
  mutable double generation_rate_ = 0.0;
};

}  // namespace cypris
