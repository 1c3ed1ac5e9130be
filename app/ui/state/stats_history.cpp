// RingSeries and StatsHistory; see stats_history.h.
#include "app/ui/state/stats_history.h"

#include <algorithm>

namespace cypris {

RingSeries::RingSeries(size_t capacity) : data_(capacity == 0 ? 1 : capacity, 0.0f) {}

void RingSeries::push(float v) {
  data_[head_] = v;
  head_ = (head_ + 1) % data_.size();
  if (size_ < data_.size()) ++size_;
}

int RingSeries::plot_offset() const {
  // While not full the oldest sample is at 0; once full it is the next write position.
  return size_ < data_.size() ? 0 : static_cast<int>(head_);
}

float RingSeries::at(size_t i) const {
  if (i >= size_) return 0.0f;
  return data_[(plot_offset() + i) % data_.size()];
}

float RingSeries::latest() const {
  return size_ == 0 ? 0.0f : at(size_ - 1);
}

float RingSeries::max() const {
  float m = 0.0f;
  for (size_t i = 0; i < size_; ++i) m = std::max(m, at(i));
  return m;
}

std::vector<float> RingSeries::ordered() const {
  std::vector<float> out;
  out.reserve(size_);
  for (size_t i = 0; i < size_; ++i) out.push_back(at(i));
  return out;
}

void RingSeries::clear() {
  head_ = 0;
  size_ = 0;
  std::fill(data_.begin(), data_.end(), 0.0f);
}

StatsHistory::StatsHistory(size_t capacity)
    : kv_usage(capacity), running(capacity), waiting(capacity), gen_throughput(capacity), prompt_throughput(capacity) {}

void StatsHistory::push(const EngineStats& s) {
  latest_ = s;
  kv_usage.push(static_cast<float>(s.kv_cache_usage * 100.0));
  running.push(static_cast<float>(s.num_running));
  waiting.push(static_cast<float>(s.num_waiting));
  gen_throughput.push(static_cast<float>(s.generation_tokens_per_s));
  prompt_throughput.push(static_cast<float>(s.prompt_tokens_per_s));
}

void StatsHistory::clear() {
  kv_usage.clear();
  running.clear();
  waiting.clear();
  gen_throughput.clear();
  prompt_throughput.clear();
  latest_ = EngineStats{};
}

}  // namespace cypris
