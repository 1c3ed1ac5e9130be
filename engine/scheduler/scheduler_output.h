// What one scheduler step decided (SchedulerOutput, with the flattened batch the model runner
// consumes as is: batch_context.h) and what the engine reports back after the model ran
// (StepResult -> RequestUpdate). Model code never sees scheduler objects.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/request/request.h"
#include "engine/kv/kv_cache_manager.h"
#include "engine/scheduler/batch_context.h"

namespace cypris {

struct ScheduledRequest {
  std::shared_ptr<Request> request;
  int32_t num_computed_tokens = 0;   // before this step: position of the first scheduled token
  int32_t num_scheduled_tokens = 0;  // tokens [num_computed_tokens, +num_scheduled_tokens) run now
  std::vector<int32_t> block_ids;    // the whole block table after this step's allocation
  // First step since admission, recompute-resumption, swap-in or fork: the runner (re)creates any
  // per-request state it keeps.
  bool is_new = false;
  // The step reaches the request's last known token, so its logits are sampled. False for all
  // but the last chunk of a chunked prefill.
  bool samples = false;
  // Speculative decoding: drafted tokens run after the last known token (their count is part of
  // num_scheduled_tokens, their KV slots are reserved); the step has a logits row for the last
  // known token and each draft. Empty for a step without speculation.
  std::vector<int32_t> spec_token_ids;
};

// --context-shift across requests: a newly admitted request whose prompt took KV from a finished
// sequence (KvCacheManager::find_reuse), for the engine's log.
struct ContextReuse {
  std::string request_id;
  int32_t cached = 0;   // prompt tokens from the prefix cache before it
  int32_t same = 0;     // tokens copied from the same positions
  int32_t moved = 0;    // tokens moved down, keys rotated
  int32_t distance = 0;  // positions they moved down by
  int32_t computed = 0;  // prompt tokens left to compute
};

struct SchedulerOutput {
  int32_t block_size = 0;
  // Order: requests that were running, then swapped-in ones, then newly admitted ones.
  std::vector<ScheduledRequest> scheduled;
  int32_t total_num_scheduled_tokens = 0;

  std::vector<std::string> preempted_ids;    // blocks freed; will recompute from scratch
  std::vector<std::string> swapped_out_ids;  // blocks moved to the CPU pool this step
  std::vector<std::string> swapped_in_ids;   // back on the GPU (also in `scheduled`)
  std::vector<std::string> finished_ids;     // finished or aborted since the previous step

  // Token moves of context shifts by rotation (since the previous step), performed first, before
  // the block copies: a shift's old blocks are free again and may be swapped or copied into.
  // Also the copies of KV that newly admitted requests reuse from finished sequences (context_reuses).
  std::vector<KvSlotMove> kv_moves;
  std::vector<ContextReuse> context_reuses;
  // Block copies the runner performs before the forward pass, in this order:
  std::vector<BlockCopy> blocks_to_swap_out;  // 1. GPU -> CPU
  std::vector<BlockCopy> blocks_to_swap_in;   // 2. CPU -> GPU
  std::vector<BlockCopy> blocks_to_copy;      // 3. GPU -> GPU (copy-on-write after fork)

  // The step flattened for the model runner (build_batch_context of the above); the engine adds
  // its prompt-logprob rows and orders the logits rows, the runner reads the rest as is.
  BatchContext batch;

  bool empty() const { return scheduled.empty(); }
};

// What the model step produced for one scheduled request.
struct StepResult {
  std::string request_id;
  // Sampled tokens (one, or more with speculative decoding). Ignored for a partial prefill. With
  // drafts, the verified tokens: the accepted drafts, then the target's own token; the scheduler
  // keeps the KV of the accepted drafts and rolls back the rest.
  std::vector<int32_t> sampled_token_ids;
  // Set by the engine's stop checks (FinishedStopped for EOS/stop ids) or on a fault
  // (FinishedError); Running = keep going. Length limits are the scheduler's job.
  RequestStatus finish = RequestStatus::Running;
};

// What update_from_output() changed, per request that was scheduled.
struct RequestUpdate {
  std::shared_ptr<Request> request;
  std::vector<int32_t> new_token_ids;  // appended to the request this step
  RequestStatus status = RequestStatus::Running;
  bool finished() const { return is_finished(status); }
};

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;  // includes requests preempted for recompute
  int32_t num_swapped = 0;
  double kv_cache_usage = 0.0;      // fraction of GPU blocks in use
  double cpu_kv_cache_usage = 0.0;  // fraction of CPU swap blocks in use
  PrefixCacheStats prefix_cache;
  double prefix_cache_hit_rate = 0.0;
  int64_t num_preemptions = 0;  // total so far
  int64_t num_context_shifts = 0;  // --context-shift: windows shifted so far
  int64_t num_context_shift_moves = 0;  // tokens whose KV a shift moved by rotation so far
  // --context-shift across requests, so far: requests that reused a finished sequence's KV, the
  // tokens they reused (besides prefix-cache hits) and of those the ones moved with rotated keys.
  int64_t num_context_reuses = 0;
  int64_t num_context_reuse_tokens = 0;
  int64_t num_context_reuse_moved = 0;
};

}  // namespace cypris
