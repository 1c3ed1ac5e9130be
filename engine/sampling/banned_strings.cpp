// banned_strings: Aho-Corasick automaton and the per-sequence matcher (see the header for behaviour).
#include "engine/sampling/banned_strings.h"

#include <algorithm>
#include <deque>

#include "engine/common/error.h"

namespace cypris {

BannedStrings::BannedStrings(std::span<const std::string> phrases) : phrases_(phrases.begin(), phrases.end()) {
  nodes_.emplace_back();
  for (size_t i = 0; i < phrases_.size(); ++i) {
    const std::string& p = phrases_[i];
    CYPRIS_CHECK(!p.empty(), "banned_strings must not contain an empty string (entry {})", i);
    int32_t s = 0;
    for (unsigned char c : p) {
      int32_t nx = child(s, c);
      if (nx < 0) {
        nx = static_cast<int32_t>(nodes_.size());
        Node n;
        n.depth = nodes_[s].depth + 1;
        auto& ch = nodes_[s].children;
        ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, int32_t{0})), {c, nx});
        nodes_.push_back(std::move(n));
      }
      s = nx;
    }
    if (nodes_[s].out < 0) nodes_[s].out = static_cast<int32_t>(i);
  }
  // Breadth-first: fail links, and `out` inherited from the fail target when a node ends no phrase
  // itself (a node's own phrase is always the longest one ending there).
  std::deque<int32_t> queue;
  for (const auto& [c, ch] : nodes_[0].children) {
    nodes_[ch].fail = 0;
    queue.push_back(ch);
  }
  while (!queue.empty()) {
    const int32_t s = queue.front();
    queue.pop_front();
    if (nodes_[s].out < 0) nodes_[s].out = nodes_[nodes_[s].fail].out;
    for (const auto& [c, ch] : nodes_[s].children) {
      int32_t f = nodes_[s].fail;
      while (f != 0 && child(f, c) < 0) f = nodes_[f].fail;
      const int32_t fc = child(f, c);
      nodes_[ch].fail = (fc >= 0 && fc != ch) ? fc : 0;
      queue.push_back(ch);
    }
  }
}

int32_t BannedStrings::child(int32_t state, unsigned char c) const {
  const auto& ch = nodes_[state].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, int32_t{0}));
  return it != ch.end() && it->first == c ? it->second : -1;
}

int32_t BannedStrings::next(int32_t state, unsigned char c) const {
  while (true) {
    const int32_t nx = child(state, c);
    if (nx >= 0) return nx;
    if (state == 0) return 0;
    state = nodes_[state].fail;
  }
}

BannedStringMatcher::BannedStringMatcher(std::shared_ptr<const BannedStrings> strings) : strings_(std::move(strings)) {
  CYPRIS_CHECK(strings_ != nullptr, "BannedStringMatcher needs a phrase set");
}

size_t BannedStringMatcher::token_at_offset(size_t offset) const {
  // The token whose text starts exactly here (the first, when empty tokens share the offset), else
  // the token whose text contains this byte.
  auto it = std::lower_bound(offsets_.begin(), offsets_.end(), offset);
  if (it != offsets_.end() && *it == offset) return static_cast<size_t>(it - offsets_.begin());
  return static_cast<size_t>(it - offsets_.begin()) - 1;
}

std::optional<BannedStringHit> BannedStringMatcher::push(int32_t token_id, std::string_view text) {
  const size_t start_len = text_.size();
  offsets_.push_back(start_len);
  ids_.push_back(token_id);
  int32_t s = state();
  text_.append(text);
  std::optional<size_t> best_start;
  int32_t best_phrase = -1;
  for (size_t pos = start_len; pos < text_.size(); ++pos) {
    s = strings_->next(s, static_cast<unsigned char>(text_[pos]));
    const int32_t m = strings_->longest_match(s);
    if (m >= 0) {
      const size_t begin = pos + 1 - strings_->phrase(m).size();
      if (!best_start || begin < *best_start) {
        best_start = begin;
        best_phrase = m;
      }
    }
  }
  end_states_.push_back(s);
  if (!best_start) return std::nullopt;
  BannedStringHit hit;
  hit.token_index = token_at_offset(*best_start);
  hit.rewind_tokens = ids_.size() - hit.token_index;
  hit.ban_token_id = ids_[hit.token_index];
  hit.phrase_index = static_cast<size_t>(best_phrase);
  hit.text_offset = *best_start;
  return hit;
}

void BannedStringMatcher::rewind(size_t num_tokens) {
  num_tokens = std::min(num_tokens, ids_.size());
  const size_t keep = ids_.size() - num_tokens;
  if (keep < ids_.size()) text_.resize(offsets_[keep]);
  offsets_.resize(keep);
  ids_.resize(keep);
  end_states_.resize(keep);
}

size_t BannedStringMatcher::safe_length() const {
  const int d = strings_->depth(state());
  if (d == 0 || ids_.empty()) return text_.size();
  const size_t hold_from = text_.size() - static_cast<size_t>(d);
  return offsets_[token_at_offset(hold_from)];
}

size_t BannedStringMatcher::safe_tokens() const {
  return static_cast<size_t>(std::lower_bound(offsets_.begin(), offsets_.end(), safe_length()) - offsets_.begin());
}

}  // namespace cypris
