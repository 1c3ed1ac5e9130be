// banned_strings: phrases that must never appear in the output text. BannedStrings is an
// Aho-Corasick automaton over the phrases' bytes (built once per request, cheap for thousands of
// phrases); BannedStringMatcher follows one sequence's output token by token.
//
// Behaviour:
// - Matching is on bytes, case-sensitive, anywhere in the output text (not the prompt).
// - When a pushed token completes a phrase, push() returns a hit: the index of the output token in
//   which the phrase began, how many tokens to rewind (back to and including that token), and that
//   token's id. The engine then drops those tokens (SamplingState::rewind, matcher.rewind, the
//   detokenizer) and bans the id at that position (SamplingState::ban_at_next_position), so the
//   model must begin differently there. Bans accumulate per position when it tries again.
// - If several phrases complete in one token, the one that began earliest wins (largest rewind).
// - Streaming: safe_length() is how much of text() can be sent to the client. Text that could be the
//   start of a banned phrase is held back, from the start of the token it lies in, because a rewind
//   replaces whole tokens. A later rewind never removes text that was already safe.
// - A token with empty text (e.g. the first bytes of a UTF-8 character the detokenizer holds back)
//   counts as the token where a phrase starting at its offset began.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cypris {

class BannedStrings {
 public:
  // Throws cypris::Error naming banned_strings when a phrase is empty.
  explicit BannedStrings(std::span<const std::string> phrases);

  bool empty() const { return phrases_.empty(); }
  size_t size() const { return phrases_.size(); }
  const std::string& phrase(size_t i) const { return phrases_[i]; }

  // Automaton interface (state 0 = root).
  int32_t next(int32_t state, unsigned char c) const;
  int depth(int32_t state) const { return nodes_[state].depth; }
  // The longest phrase that is a suffix of the text read so far (index into phrases), or -1.
  int32_t longest_match(int32_t state) const { return nodes_[state].out; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t fail = 0;
    int32_t out = -1;  // longest phrase ending here (own phrase, else inherited via fail)
    int depth = 0;
  };
  int32_t child(int32_t state, unsigned char c) const;

  std::vector<std::string> phrases_;
  std::vector<Node> nodes_;
};

struct BannedStringHit {
  size_t token_index;    // output token in which the phrase began
  size_t rewind_tokens;  // output tokens to drop (that token and all after it)
  int32_t ban_token_id;  // ban this id at that position
  size_t phrase_index;
  size_t text_offset;  // byte offset of the phrase in text()
};

class BannedStringMatcher {
 public:
  explicit BannedStringMatcher(std::shared_ptr<const BannedStrings> strings);

  // Appends one output token and the text it added.
  std::optional<BannedStringHit> push(int32_t token_id, std::string_view text);
  // Drops the last num_tokens tokens and their text.
  void rewind(size_t num_tokens);

  size_t num_tokens() const { return ids_.size(); }
  const std::string& text() const { return text_; }
  // Bytes of text() that can be streamed now.
  size_t safe_length() const;
  // Leading tokens that can be streamed now: those whose text lies before safe_length(). A token
  // with empty text at that point is held back too (a phrase may still begin at its offset).
  size_t safe_tokens() const;
  int32_t token_id(size_t i) const { return ids_[i]; }
  // The text token i added.
  std::string_view token_text(size_t i) const {
    const size_t end = i + 1 < offsets_.size() ? offsets_[i + 1] : text_.size();
    return std::string_view(text_).substr(offsets_[i], end - offsets_[i]);
  }

 private:
  size_t token_at_offset(size_t offset) const;
  int32_t state() const { return end_states_.empty() ? 0 : end_states_.back(); }

  std::shared_ptr<const BannedStrings> strings_;
  std::string text_;
  std::vector<size_t> offsets_;  // start offset of each token's text
  std::vector<int32_t> ids_;
  std::vector<int32_t> end_states_;  // automaton state after each token
};

}  // namespace cypris
