// The tokenizer a GGUF file carries in its tokenizer.* metadata (`llama` SentencePiece-style and
// `gpt2` byte-level BPE vocabularies), with its special tokens and chat templates.
#pragma once

#include <memory>
#include <string_view>

#include "engine/loader/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris {

// Throws Error naming the file and key when the vocabulary is missing, malformed or of an
// unsupported kind.
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufModel& model);

// general.architecture, or "" when absent.
std::string_view gguf_architecture_name(const GgufModel& model);

}  // namespace cypris
