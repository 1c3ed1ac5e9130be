// Token sequences for the scheduler and KV-cache tests: runs of consecutive ids, and prompts put
// together from them (a chat's system prompt, messages, reply).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <vector>

namespace cypris::test {

// The n token ids first, first + 1, ..., first + n - 1.
inline std::vector<int32_t> seq(int32_t first, int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// The parts one after the other.
inline std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace cypris::test
