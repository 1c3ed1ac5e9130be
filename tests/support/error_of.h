// The message a call throws, for tests that check what a user is told when something is refused.
#pragma once

#include <functional>
#include <string>

#include "engine/common/error.h"

namespace cypris::test {

// The message of the cypris::Error that fn throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace cypris::test
