// Stop strings over streamed text: catches a stop string split across deltas, emits only text
// that cannot be the start of a stop string, and cuts the output at the first stop.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cypris {

struct StopCheck {
  std::string text;                  // safe to emit now
  std::optional<size_t> stop_index;  // which stop string matched (index into the list), when stopped
  bool stopped() const { return stop_index.has_value(); }
};

class StopStringMatcher {
 public:
  // Empty stop strings are ignored. include_stop_str_in_output: the emitted text ends with the stop
  // string; otherwise it ends right before it.
  StopStringMatcher(std::vector<std::string> stops, bool include_stop_str_in_output = false);

  // Feeds the next delta. After a stop, further pushes return nothing.
  StopCheck push(std::string_view delta);
  // End of generation without a stop: the text still held back.
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& held() const { return held_; }

 private:
  std::vector<std::string> stops_;
  bool include_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace cypris
