// An environment variable set (or unset) for the lifetime of a scope, restored afterwards, for tests
// of settings read from the environment (HF_HOME, HF_HUB_OFFLINE, ...).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace cypris::test {

class ScopedEnv {
 public:
  // value nullptr: the variable is unset for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace cypris::test
