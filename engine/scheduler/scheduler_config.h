// SchedulerConfig: the knobs of continuous batching (Aphrodite/vLLM flag names in comments) and
// their validation. The option table in engine/config/ fills this struct.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/kv/kv_cache_manager.h"

namespace cypris {

enum class SchedulingPolicy { Fcfs, Priority };  // --scheduling-policy fcfs|priority
enum class PreemptionMode { Recompute, Swap };   // --preemption-mode recompute|swap

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 2048;  // --max-num-batched-tokens: token budget of one step
  int32_t max_num_seqs = 256;             // --max-num-seqs: requests running at once
  int32_t max_model_len = 2048;           // --max-model-len: prompt + output limit per request
  bool enable_chunked_prefill = false;    // --enable-chunked-prefill
  SchedulingPolicy policy = SchedulingPolicy::Fcfs;
  PreemptionMode preemption_mode = PreemptionMode::Recompute;
  double delay_factor = 0.0;           // --scheduler-delay-factor
  int32_t block_size = 16;             // --block-size
  int32_t num_gpu_blocks = 0;          // profiling or --num-gpu-blocks-override
  int32_t num_cpu_blocks = 0;          // --swap-space converted to blocks
  bool enable_prefix_caching = false;  // --enable-prefix-caching
  // --context-shift: a sequence that reaches max_model_len drops old tokens after a kept prefix and
  // goes on (Scheduler::shift_context) instead of finishing with "length".
  bool context_shift = false;
  // --num-lookahead-slots (k or more while speculating, 0 without): a decode that verifies drafts
  // reserves KV slots for this many positions after its last token (its drafts take the first
  // ones; a decode gets at most this many drafts). Reserved only when free without preempting
  // anyone; what the verification does not keep goes back after the step.
  int32_t num_lookahead_slots = 0;
  // With context_shift: keep the moved tokens' KV, their keys rotated by the runner
  // (SchedulerOutput::kv_moves), instead of computing them again; and let a new prompt reuse a
  // finished sequence's KV where it repeats a stretch of it (KvCacheManager::find_reuse).
  bool context_shift_rotate = false;

  // Throws cypris::Error naming the flag, the value and what is allowed.
  void validate() const;
  KvCacheConfig kv_cache_config() const { return {block_size, num_gpu_blocks, num_cpu_blocks, enable_prefix_caching}; }
};

std::string_view to_string(SchedulingPolicy policy);
std::string_view to_string(PreemptionMode mode);
// Parse the flag values ("fcfs", "priority", "recompute", "swap"); cypris::Error otherwise.
SchedulingPolicy parse_scheduling_policy(std::string_view text);
PreemptionMode parse_preemption_mode(std::string_view text);

}  // namespace cypris
