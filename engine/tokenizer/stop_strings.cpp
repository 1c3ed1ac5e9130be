// StopStringMatcher. See stop_strings.h.
#include "engine/tokenizer/stop_strings.h"

#include <algorithm>

namespace cypris {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop_str_in_output)
    : include_(include_stop_str_in_output) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopCheck StopStringMatcher::push(std::string_view delta) {
  StopCheck r;
  if (stopped_) return r;
  held_ += delta;
  // The stop that begins first wins; at the same start, the earlier one in the list.
  size_t best = std::string::npos, best_idx = 0;
  for (size_t i = 0; i < stops_.size(); ++i) {
    size_t p = held_.find(stops_[i]);
    if (p != std::string::npos && p < best) {
      best = p;
      best_idx = i;
    }
  }
  if (best != std::string::npos) {
    r.text = held_.substr(0, include_ ? best + stops_[best_idx].size() : best);
    r.stop_index = best_idx;
    held_.clear();
    stopped_ = true;
    return r;
  }
  // Hold the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopStringMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace cypris
