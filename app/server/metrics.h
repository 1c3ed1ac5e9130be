// Prometheus text exposition for GET /metrics, with Aphrodite's metric names (aphrodite:...).
// Gauges and token counters come from the engine's EngineStats; the latency histograms
// (time to first token, inter-token time, end-to-end latency) are measured by the server from the
// timing of each request's stream (RequestTimer).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/stats.h"

namespace cypris::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // "<name>_bucket{...,le=...} n" lines, _sum and _count; labels is `model_name="x"`.
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative)
  double sum_ = 0.0;
  uint64_t count_ = 0;
  mutable std::mutex mu_;
};

class ServerMetrics {
 public:
  ServerMetrics();
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  void observe_itl(double seconds) { itl_.observe(seconds); }
  void observe_e2e(double seconds) { e2e_.observe(seconds); }
  void count_finished(const std::string& finish_reason);

  std::string render(const EngineStats& s, const std::string& model_name) const;

 private:
  Histogram ttft_, itl_, e2e_;
  mutable std::mutex mu_;
  uint64_t finished_stop_ = 0, finished_length_ = 0, finished_abort_ = 0, finished_error_ = 0;
};

// Timing of one request's stream: call on_tokens() when a delta with new tokens arrives and
// finish() once; they feed the histograms above.
class RequestTimer {
 public:
  // start: when the request arrived, so the time to first token includes queueing and prefill.
  explicit RequestTimer(ServerMetrics* m,
                        std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now())
      : m_(m), start_(start), last_(start_) {}
  void on_tokens(int64_t num_new_tokens);
  void finish(const std::string& finish_reason);

 private:
  ServerMetrics* m_;
  std::chrono::steady_clock::time_point start_, last_;
  bool first_ = true;
  bool finished_ = false;
};

}  // namespace cypris::server
