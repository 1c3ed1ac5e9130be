// Streaming detokenization for the engine: each generated id yields exactly the new text, never
// half a UTF-8 character, and all deltas plus finish() concatenate to one full decode.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace cypris {

struct DetokenizeOptions {
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;
};

class IncrementalDetokenizer {
 public:
  // context_ids: the last few prompt ids (vLLM uses 5). They are decoded first and their text is
  // dropped, so that position-dependent decoding (SentencePiece drops the leading space of the
  // first token) treats the first generated token as a continuation: "▁Hello" after a prompt gives
  // " Hello". Empty: the output is decoded as a sequence of its own.
  IncrementalDetokenizer(const Tokenizer& tok, DetokenizeOptions opts = {}, std::span<const int32_t> context_ids = {});

  // The text the new id(s) add; may be empty while a character or a byte run is incomplete.
  std::string push(int32_t id);
  std::string push(std::span<const int32_t> ids);
  // End of generation: the text still held back (an incomplete character becomes U+FFFD).
  std::string finish();

  const std::string& text() const { return text_; }  // everything returned so far
  size_t num_tokens() const { return num_tokens_; }

  static constexpr size_t kDefaultContextTokens = 5;

 private:
  std::unique_ptr<DecodeStream> stream_;
  std::string text_;
  size_t num_tokens_ = 0;
};

}  // namespace cypris
