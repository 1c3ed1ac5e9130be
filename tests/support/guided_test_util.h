// Helpers the guided-decoding tests share: the message an expression throws, and whether a
// grammar accepts a whole text.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "engine/common/error.h"
#include "engine/guided/matcher.h"
#include "tests/support/error_of.h"

namespace cypris::guided::test_util {

using cypris::test::error_of;

// True when g accepts the whole of text (and may end there).
inline bool matches(const Grammar& g, std::string_view text) {
  StackArena arena(std::make_shared<Grammar>(g));
  Stepper st(arena);
  MatchState s = st.initial();
  if (!st.advance(s, text)) return false;
  return s.can_end;
}

}  // namespace cypris::guided::test_util
