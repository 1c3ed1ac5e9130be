#include "engine/core/stats.h"

#include <fmt/format.h>

#include "engine/common/log.h"

namespace cypris {

std::string format_stats_line(const EngineStats& s) {
  return fmt::format(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, Running: {} reqs, "
      "Swapped: {} reqs, Pending: {} reqs, KV cache usage: {:.1f}%, CPU swap usage: {:.1f}%, "
      "Prefix cache hit rate: {:.1f}%",
      s.prompt_tokens_per_s, s.generation_tokens_per_s, s.num_running, s.num_swapped, s.num_waiting,
      100.0 * s.kv_cache_usage, 100.0 * s.cpu_swap_usage, 100.0 * s.prefix_cache_hit_rate) +
         (s.spec_decode ? fmt::format(", Speculative acceptance rate: {:.1f}% ({} of {} drafted tokens), "
                                      "System efficiency: {:.1f}%",
                                      100.0 * s.spec_acceptance_rate(), s.spec_accepted_tokens_total,
                                      s.spec_draft_tokens_total, 100.0 * s.spec_efficiency())
                        : std::string());
}

StatsLogger::StatsLogger(const LoggingOptions& opts, std::function<EngineStats()> snapshot)
    : snapshot_(std::move(snapshot)) {
  if (opts.disable_log_stats) return;
  auto interval = std::chrono::duration<double>(opts.log_stats_interval);
  thread_ = std::thread([this, interval] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, interval, [this] { return stop_; })) {
      lock.unlock();
      LOG_INFO("{}", format_stats_line(snapshot_()));
      lock.lock();
    }
  });
}

StatsLogger::~StatsLogger() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void log_request(const LoggingOptions& opts, const std::string& request_id, const std::string& prompt,
                 const std::string& params_summary) {
  if (opts.disable_log_requests) return;
  // --max-log-len 0 prints no prompt at all (Aphrodite's prompt[:0]).
  const int64_t max_len = opts.max_log_len.value_or(0);
  LOG_INFO("Received request {}: prompt: {:?}, {}", request_id,
           opts.max_log_len && max_len == 0 ? std::string() : clip_for_log(prompt, max_len), params_summary);
}

}  // namespace cypris
