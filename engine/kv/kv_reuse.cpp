// match_for_reuse: the common prefix, then the longest later stretch of the earlier sequence.
#include "engine/kv/kv_reuse.h"

#include <algorithm>

namespace cypris {

ReuseMatch match_for_reuse(std::span<const int32_t> prompt, int32_t start, std::span<const int32_t> earlier,
                           int32_t min_run) {
  const auto n = int32_t(prompt.size());
  const auto len = int32_t(earlier.size());
  int32_t common = 0;
  while (common < std::min(n, len) && prompt[size_t(common)] == earlier[size_t(common)]) ++common;
  // The moved stretch must continue the KV before it without a gap.
  const int32_t from = std::max(std::max(common, start), 0);
  ReuseMatch m{from, from, from};
  if (min_run < 1 || from + min_run > n) return m;
  int32_t best = 0, best_src = from, candidates = 0;
  for (int32_t q = from; q + min_run <= len && candidates < kMaxReuseCandidates; ++q) {
    if (earlier[size_t(q)] != prompt[size_t(from)] ||
        !std::equal(prompt.begin() + from, prompt.begin() + from + min_run, earlier.begin() + q))
      continue;
    ++candidates;
    int32_t run = min_run;
    while (from + run < n && q + run < len && prompt[size_t(from + run)] == earlier[size_t(q + run)]) ++run;
    if (run > best) {
      best = run;
      best_src = q;
    }
    // A later start has less of `earlier` left, so it cannot run longer once one reached either end.
    if (from + run == n || q + run == len) break;
  }
  m.run_src = best_src;
  m.end = from + best;
  return m;
}

}  // namespace cypris
