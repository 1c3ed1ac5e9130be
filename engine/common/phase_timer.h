// Wall-clock time of the phases of a long operation (the engine's start-up: config, weights,
// memory profile, KV cache, CUDA graphs), reported as one log line, so a slow start says where
// its time went.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace cypris {

class PhaseTimer {
 public:
  explicit PhaseTimer(std::string what) : what_(std::move(what)), start_(Clock::now()), last_(start_) {}

  // Ends the current phase: the time since the previous mark (or the start) is `phase`'s.
  void mark(std::string phase) {
    const auto now = Clock::now();
    phases_.emplace_back(std::move(phase), std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }
  // "<what>: config 0.01 s, weights 3.20 s, ... (total 3.31 s)"
  std::string summary() const;
  // Logs summary() at INFO.
  void log() const;

  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_;
  Clock::time_point start_, last_;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace cypris
