// Error handling for bad input and configuration: cypris::Error and CYPRIS_CHECK.
// A message says what was wrong, where (file, field, flag) and what is allowed.
// Capacity problems (no free blocks, batch full) are statuses, never errors.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace cypris {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

[[noreturn]] inline void throw_error(const std::string& msg) { throw Error(msg); }

}  // namespace cypris

// Throws cypris::Error with a formatted message when cond is false.
#define CYPRIS_CHECK(cond, ...)                                    \
  do {                                                             \
    if (!(cond)) ::cypris::throw_error(::fmt::format(__VA_ARGS__)); \
  } while (0)

#define CYPRIS_FAIL(...) ::cypris::throw_error(::fmt::format(__VA_ARGS__))
