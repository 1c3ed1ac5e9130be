// --context-shift across requests (KoboldCpp's ContextShift for chat frontends): where a new prompt
// finds its tokens in an earlier sequence's cache. A chat frontend re-sends the whole conversation
// every turn and, once it outgrows the context, drops the oldest messages after the system prompt:
// the new prompt is the earlier one's start, then a later stretch of it, then new tokens. The start
// keeps its KV where it is; the stretch's KV moves down to its new positions (keys rotated by the
// runner, Backend::move_kv_slots); only the rest is computed. Pure logic over token ids.
#pragma once

#include <cstdint>
#include <span>

namespace cypris {

// The shortest stretch worth moving: shorter matches are left to the prefill (KoboldCpp asks for far
// more, as its shift is destructive; here the earlier sequence's KV is copied, never changed).
inline constexpr int32_t kMinReuseRun = 16;
// Earlier sequences kept for reuse (KoboldCpp keeps one: its single previous context).
inline constexpr int32_t kRetainedSequences = 4;
// Occurrences of a stretch's first kMinReuseRun tokens examined per earlier sequence (bounds the
// search on repetitive text to O(kMaxReuseCandidates * prompt length) after one scan).
inline constexpr int32_t kMaxReuseCandidates = 16;

// Where the prompt's positions [start, end) take their KV from `earlier`: [start, same_end) from the
// same positions (the common prefix), [same_end, end) from positions run_src, run_src + 1, ... (one
// stretch, moved down by run_src - same_end positions). end == start: nothing to reuse.
struct ReuseMatch {
  int32_t same_end = 0;
  int32_t run_src = 0;
  int32_t end = 0;
};

// `prompt`: the tokens that may take KV (a new prompt without its last token, which is computed for
// its logits); positions before `start` already have KV (a prefix-cache hit). `earlier`: an earlier
// sequence's tokens whose KV is still in the cache. The stretch starts right where the common prefix
// (or the hit) ends, at a position of `earlier` at or after it, is at least min_run tokens long and
// is the longest such (the first on ties). Time: one scan of `earlier` plus at most
// kMaxReuseCandidates comparisons as long as the prompt.
ReuseMatch match_for_reuse(std::span<const int32_t> prompt, int32_t start, std::span<const int32_t> earlier,
                           int32_t min_run = kMinReuseRun);

}  // namespace cypris
