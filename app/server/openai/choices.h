// The choices of one OpenAI completion or chat completion while the engine's outputs arrive: one
// per prompt and n, numbered as OpenAI numbers them (prompt * n + index). The completions and chat
// handlers keep them here for streaming and non-streaming answers alike.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request/outputs.h"

namespace cypris::server {

struct ChoiceState {
  std::string text;                        // non-streaming: all the text so far
  std::vector<PositionLogprobs> logprobs;  // non-streaming: one per generated token
  std::optional<std::string> finish_reason, stop_reason;
  size_t text_offset = 0;  // streaming completions: the logprobs text_offset of the next token
  bool started = false;    // streaming completions: the first chunk (with the echo) was sent
};

class Choices {
 public:
  Choices(size_t prompts, int n) : n_(n), choices_(prompts * static_cast<size_t>(n)) {}
  size_t size() const { return choices_.size(); }
  ChoiceState& operator[](size_t i) { return choices_[i]; }

  // The number of stream si's output d (si * n + d.index); nullopt for an index that is not one of
  // this request's, so a stray output never indexes out of range.
  std::optional<size_t> index_of(size_t si, const CompletionDelta& d) const;
  // Non-streaming: adds an output's new text, logprobs and reasons to their choices.
  void add(size_t si, const RequestOutput& out);

 private:
  int n_;
  std::vector<ChoiceState> choices_;
};

// Streaming: whether an output delta (with `text`, what the chunk would say) gives the client
// anything: text, the end, logprobs. Without a tokenizer (--skip-tokenizer-init) text is always
// empty, so each new token gets its chunk or a streaming client would see nothing until the end.
bool worth_a_chunk(std::string_view text, const CompletionDelta& d, bool have_tokenizer);

}  // namespace cypris::server
