// Choices of a completion while outputs arrive (see choices.h).
#include "app/server/openai/choices.h"

namespace cypris::server {

std::optional<size_t> Choices::index_of(size_t si, const CompletionDelta& d) const {
  if (d.index < 0 || d.index >= n_) return std::nullopt;
  const size_t i = si * static_cast<size_t>(n_) + static_cast<size_t>(d.index);
  if (i >= choices_.size()) return std::nullopt;
  return i;
}

void Choices::add(size_t si, const RequestOutput& out) {
  for (const auto& d : out.outputs) {
    const auto i = index_of(si, d);
    if (!i) continue;
    ChoiceState& c = choices_[*i];
    c.text += d.text;
    c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    if (d.finish_reason) c.finish_reason = d.finish_reason;
    if (d.stop_reason) c.stop_reason = d.stop_reason;
  }
}

bool worth_a_chunk(std::string_view text, const CompletionDelta& d, bool have_tokenizer) {
  return !text.empty() || d.finish_reason || !d.logprobs.empty() || (!have_tokenizer && !d.token_ids.empty());
}

}  // namespace cypris::server
