#include "engine/common/phase_timer.h"

#include <fmt/format.h>

#include "engine/common/log.h"

namespace cypris {

std::string PhaseTimer::summary() const {
  std::string s = what_ + ":";
  for (size_t i = 0; i < phases_.size(); ++i) {
    s += fmt::format("{} {} {:.2f} s", i ? "," : "", phases_[i].first, phases_[i].second);
  }
  s += fmt::format(" (total {:.2f} s)", std::chrono::duration<double>(last_ - start_).count());
  return s;
}

void PhaseTimer::log() const {
  LOG_INFO("{}", summary());
}

}  // namespace cypris
