// IncrementalDetokenizer: a thin owner of the tokenizer's DecodeStream. See the header.
#include "engine/tokenizer/incremental_detokenizer.h"

namespace cypris {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, DetokenizeOptions opts,
                                               std::span<const int32_t> context_ids)
    : stream_(tok.decode_stream(opts.skip_special_tokens, opts.spaces_between_special_tokens)) {
  // The context's own text is discarded, also what the decoder still holds of it (a trailing
  // byte-fallback newline); a character it leaves incomplete completes in the output.
  for (int32_t id : context_ids) stream_->push(id);
  if (!context_ids.empty()) stream_->release_complete();
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ++num_tokens_;
  std::string delta = stream_->push(id);
  text_ += delta;
  return delta;
}

std::string IncrementalDetokenizer::push(std::span<const int32_t> ids) {
  std::string delta;
  for (int32_t id : ids) delta += push(id);
  return delta;
}

std::string IncrementalDetokenizer::finish() {
  std::string delta = stream_->finish();
  text_ += delta;
  return delta;
}

}  // namespace cypris
