// SchedulerConfig validation and the flag value names.
#include "engine/scheduler/scheduler_config.h"

#include <cmath>

#include "engine/common/error.h"

namespace cypris {

void SchedulerConfig::validate() const {
  CYPRIS_CHECK(max_model_len >= 1, "--max-model-len must be >= 1, got {}", max_model_len);
  CYPRIS_CHECK(max_num_seqs >= 1, "--max-num-seqs must be >= 1, got {}", max_num_seqs);
  CYPRIS_CHECK(max_num_batched_tokens >= 1, "--max-num-batched-tokens must be >= 1, got {}", max_num_batched_tokens);
  CYPRIS_CHECK(max_num_batched_tokens >= max_num_seqs,
               "--max-num-batched-tokens ({}) must be >= --max-num-seqs ({}): every running sequence needs at "
               "least one token of the step's budget",
               max_num_batched_tokens, max_num_seqs);
  CYPRIS_CHECK(enable_chunked_prefill || max_num_batched_tokens >= max_model_len,
               "--max-num-batched-tokens ({}) is smaller than --max-model-len ({}): a prompt of the full "
               "length could never be scheduled. Raise --max-num-batched-tokens, lower --max-model-len, or "
               "pass --enable-chunked-prefill",
               max_num_batched_tokens, max_model_len);
  CYPRIS_CHECK(std::isfinite(delay_factor) && delay_factor >= 0.0,
               "--scheduler-delay-factor must be a finite number >= 0, got {}", delay_factor);
  kv_cache_config().validate();
  CYPRIS_CHECK(num_lookahead_slots >= 0, "--num-lookahead-slots must be >= 0, got {}", num_lookahead_slots);
  CYPRIS_CHECK(preemption_mode != PreemptionMode::Swap || num_cpu_blocks > 0,
               "--preemption-mode swap needs CPU swap space (--swap-space > 0)");
}

std::string_view to_string(SchedulingPolicy policy) {
  return policy == SchedulingPolicy::Fcfs ? "fcfs" : "priority";
}
std::string_view to_string(PreemptionMode mode) {
  return mode == PreemptionMode::Recompute ? "recompute" : "swap";
}

SchedulingPolicy parse_scheduling_policy(std::string_view text) {
  if (text == "fcfs") return SchedulingPolicy::Fcfs;
  if (text == "priority") return SchedulingPolicy::Priority;
  CYPRIS_FAIL("--scheduling-policy must be 'fcfs' or 'priority', got '{}'", text);
}

PreemptionMode parse_preemption_mode(std::string_view text) {
  if (text == "recompute") return PreemptionMode::Recompute;
  if (text == "swap") return PreemptionMode::Swap;
  CYPRIS_FAIL("--preemption-mode must be 'recompute' or 'swap', got '{}'", text);
}

}  // namespace cypris
