// Engine statistics: the snapshot the UI, /metrics and the periodic log line read, the periodic
// stats logger (--disable-log-stats, --log-stats-interval) and request logging
// (--disable-log-requests, --max-log-len).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "engine/config/engine_config.h"

namespace cypris {

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_swapped = 0;
  double kv_cache_usage = 0.0;        // fraction of GPU (or CPU-device) KV blocks in use
  double cpu_swap_usage = 0.0;        // fraction of the swap pool in use
  double prefix_cache_hit_rate = 0.0;  // hits / queried tokens, since start
  int64_t num_preemptions_total = 0;
  int64_t num_swap_outs_total = 0;  // preemptions by swap
  int64_t num_context_shifts_total = 0;  // --context-shift: windows shifted
  int64_t context_shift_moved_tokens_total = 0;  // tokens whose KV a shift moved (by rotation) instead of recomputing
  // --context-shift across requests: prompts that reused a finished sequence's KV, the prompt tokens
  // they reused that way (prefix-cache hits not counted), and of those the ones moved with rotated keys.
  int64_t context_reuses_total = 0;
  int64_t context_reused_tokens_total = 0;
  int64_t context_reuse_moved_tokens_total = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  double prompt_tokens_per_s = 0.0;      // over the last interval
  double generation_tokens_per_s = 0.0;  // over the last interval
  // Speculative decoding (all 0 without it), totals since start: tokens drafted and verified,
  // drafts accepted, tokens emitted by steps that verified drafts, and the most those steps could
  // have emitted (drafts + 1 each). Acceptance rate: accepted / draft; system efficiency:
  // emitted / max emitted (Aphrodite's and vLLM's spec-decode metrics).
  bool spec_decode = false;
  int64_t spec_draft_tokens_total = 0;
  int64_t spec_accepted_tokens_total = 0;
  int64_t spec_emitted_tokens_total = 0;
  int64_t spec_max_emitted_tokens_total = 0;
  double spec_acceptance_rate() const {
    return spec_draft_tokens_total ? double(spec_accepted_tokens_total) / double(spec_draft_tokens_total) : 0.0;
  }
  double spec_efficiency() const {
    return spec_max_emitted_tokens_total ? double(spec_emitted_tokens_total) / double(spec_max_emitted_tokens_total)
                                         : 0.0;
  }
};

std::string format_stats_line(const EngineStats& s);

// Logs format_stats_line(snapshot()) every interval on its own thread, unless the options
// disable it. Stops (promptly) in the destructor.
class StatsLogger {
 public:
  StatsLogger(const LoggingOptions& opts, std::function<EngineStats()> snapshot);
  ~StatsLogger();
  StatsLogger(const StatsLogger&) = delete;
  StatsLogger& operator=(const StatsLogger&) = delete;

 private:
  std::function<EngineStats()> snapshot_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// One log line for an incoming request, unless --disable-log-requests; the prompt is clipped to
// --max-log-len characters.
void log_request(const LoggingOptions& opts, const std::string& request_id, const std::string& prompt,
                 const std::string& params_summary);

}  // namespace cypris
