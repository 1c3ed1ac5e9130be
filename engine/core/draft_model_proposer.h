// DraftModelProposer: speculative decoding's draft-model proposer (--speculative-model PATH). A small
// model with the target's vocabulary runs in its own ModelRunner (unsharded, or tensor-parallel over
// as many thread ranks as the target) with its own paged KV cache; each
// engine step it drafts up to k tokens for every speculating sequence, batched over them: one
// forward over the tokens its cache lacks (the whole prompt the first time, afterwards the tokens
// the last verification accepted), then k - 1 one-token decode forwards. Each drafted token is drawn
// from the draft's sampling distribution q under the request's own samplers (temperature, top-p,
// penalties over the history so far), and q is kept for verification by rejection sampling
// (engine/spec/rejection_sampler.h), which then emits tokens distributed exactly as the target's.
//
// The draft's cache follows the sequences by content: the tokens whose K/V it holds are kept per
// sequence, and each step starts from their longest common prefix with the sequence's tokens, so
// accepted drafts keep their K/V, rejected ones are overwritten, and a preempted or rewound
// sequence needs no notice. Sequences that no longer run give their blocks back (retain()).
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/config/engine_config.h"
#include "engine/runtime/model_runner.h"

namespace cypris {

class Sampler;
class SamplingState;
class Tokenizer;
struct SamplingParams;
struct SpecDecodeConfig;

struct DraftModelConfig {
  int32_t num_tokens = 1;              // --num-speculative-tokens: at most this many drafts per step
  int64_t max_model_len = 0;           // the draft's context limit (--speculative-max-model-len or its config)
  int64_t max_num_batched_tokens = 0;  // tokens per draft forward (a long catch-up is split)
};

// One sequence to draft for.
struct DraftInput {
  std::string request_id;
  std::span<const int32_t> tokens;  // prompt then output so far
  const SamplingParams* params = nullptr;
  const SamplingState* state = nullptr;  // the target's sampler state of the sequence (history, Philox key)
  int32_t max_tokens = 0;                // at most this many drafts (0: none)
};

struct DraftProposal {
  std::vector<int32_t> tokens;  // the drafts (empty: none this step)
  std::vector<float> probs;     // [tokens.size(), vocab]: q of each drafted position
};

class DraftModelProposer {
 public:
  // runner: the draft's runner (its KV cache sized by the caller); sampler: one with the shared vocabulary.
  DraftModelProposer(std::unique_ptr<ModelRunner> runner, Sampler& sampler, DraftModelConfig config);
  ~DraftModelProposer();

  // Drafts for each input (same order). A sequence gets none when it would pass the draft's context
  // limit or its cache has no room (it then decodes without drafts; nothing fails).
  std::vector<DraftProposal> propose(std::span<const DraftInput> inputs);
  // Gives back the cache blocks of every sequence not in `live`.
  void retain(const std::unordered_set<std::string>& live);

  ModelRunner& runner() { return *runner_; }
  const DraftModelConfig& config() const { return config_; }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }

 private:
  struct Seq {
    std::vector<int32_t> blocks;  // the draft cache's blocks of this sequence
    std::vector<int32_t> cached;  // the tokens whose K/V are in them, in position order
  };
  // One forward over (seq, first position, tokens) runs; returns the logits of each run's last token.
  struct Run {
    Seq* seq;
    int32_t start;
    std::vector<int32_t> tokens;
    bool wants_logits;
  };
  Logits forward(const std::vector<Run>& runs);
  bool reserve(Seq& s, int32_t num_tokens);

  std::unique_ptr<ModelRunner> runner_;
  Sampler& sampler_;
  DraftModelConfig config_;
  int32_t block_size_;
  int32_t vocab_;
  std::vector<int32_t> free_;
  std::unordered_map<std::string, Seq> seqs_;
};

// Loads the draft model of spec.draft_model (a folder, a .gguf file or a Hub id, with cfg's
// --load-format, --dtype and device; --speculative-model-quantization; spec.draft_tp ranks as threads
// of this process, one pipeline stage) with a KV cache of target_num_blocks blocks plus room for k
// more tokens per sequence (the target's token capacity). target_in_processes: the target's ranks are
// MPI processes (--distributed-executor-backend mpi); the draft then runs unsharded in this process
// (an explicit draft tensor-parallel size above 1 is refused by name). Refuses a draft whose
// vocabulary differs from the target's (size, or a token of its tokenizer when both have one),
// naming both models. target_tokenizer may be null (--skip-tokenizer-init).
std::unique_ptr<DraftModelProposer> load_draft_model(const EngineConfig& cfg, const SpecDecodeConfig& spec,
                                                     const ModelRunner& target, bool target_in_processes,
                                                     const Tokenizer* target_tokenizer, Sampler& sampler,
                                                     int64_t max_num_batched_tokens);

}  // namespace cypris
