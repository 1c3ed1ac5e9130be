// A small PCRE2 wrapper for the tokenizers' split patterns: UTF + Unicode properties, JIT-compiled,
// safe to share between threads.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cypris {

class Regex {
 public:
  // literal: match the pattern text as is. where: the file and field, for the error message.
  Regex(std::string_view pattern, bool literal, std::string_view where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [start, end) byte ranges of the non-overlapping matches in s (valid UTF-8),
  // left to right, including empty ones.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;
  // True when the pattern matches s starting at byte offset `at` (anchored there).
  bool matches_at(std::string_view s, size_t at) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace cypris
