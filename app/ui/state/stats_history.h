// The Stats panel's model: fixed-size ring buffers of engine statistics samples, laid out so
// ImGui::PlotLines can draw them directly (values + offset of the oldest sample).
#pragma once

#include <cstddef>
#include <vector>

#include "engine/core/stats.h"

namespace cypris {

// A ring of the last `capacity` float samples.
class RingSeries {
 public:
  explicit RingSeries(size_t capacity);
  void push(float v);
  size_t size() const { return size_; }
  size_t capacity() const { return data_.size(); }
  // i = 0 is the oldest kept sample.
  float at(size_t i) const;
  float latest() const;  // 0 when empty
  float max() const;     // 0 when empty
  // For PlotLines(values, count, offset): the raw storage and the index of the oldest sample.
  const float* data() const { return data_.data(); }
  int plot_count() const { return static_cast<int>(size_); }
  int plot_offset() const;
  std::vector<float> ordered() const;  // oldest first
  void clear();

 private:
  std::vector<float> data_;
  size_t head_ = 0;  // next write position
  size_t size_ = 0;
};

class StatsHistory {
 public:
  explicit StatsHistory(size_t capacity = 240);
  void push(const EngineStats& s);
  const EngineStats& latest() const { return latest_; }
  bool empty() const { return kv_usage.size() == 0; }
  void clear();

  RingSeries kv_usage;           // percent 0..100
  RingSeries running;            // requests
  RingSeries waiting;            // requests
  RingSeries gen_throughput;     // generated tokens/s
  RingSeries prompt_throughput;  // prompt tokens/s

 private:
  EngineStats latest_{};
};

}  // namespace cypris
