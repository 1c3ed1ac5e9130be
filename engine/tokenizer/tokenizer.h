// The Tokenizer interface every front end and the engine use. Implementations: SentencePiece
// (tokenizer.model), Hugging Face tokenizer.json (BPE, byte-level and SentencePiece-style), and
// GPT-2 vocab.json + merges.txt. load_tokenizer() picks one from a model folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cypris {

struct NamedChatTemplate {
  std::string name;  // "default", "tool_use", ...
  std::string source;
};

// Streaming decode of one sequence: push ids as they are generated. The texts returned by push(),
// followed by finish(), concatenate to exactly decode(all ids) with the same options. A push returns
// only text that no later id can change (never half a UTF-8 character).
class DecodeStream {
 public:
  virtual ~DecodeStream() = default;
  virtual std::string push(int32_t id) = 0;
  virtual std::string finish() = 0;  // end of sequence: the text still held back
  // Mid-stream: the held-back text that is already complete (e.g. a byte-fallback "\n" that waits
  // to see whether more bytes follow), the stream going on. The incremental detokenizer drops what
  // the prompt context leaves held back this way, so a chat answer does not start with the prompt's
  // last newline.
  virtual std::string release_complete() { return ""; }
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special_tokens: BOS/EOS and the post-processor template as the model's config says
  // (Hugging Face `encode(text, add_special_tokens=...)`). Special tokens written in the text are
  // always recognised.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true,
                             bool spaces_between_special_tokens = true) const = 0;

  // A fresh streaming decoder (see DecodeStream). The default re-decodes everything on each push;
  // the built-in tokenizers override it with an exact incremental one.
  virtual std::unique_ptr<DecodeStream> decode_stream(bool skip_special_tokens = true,
                                                      bool spaces_between_special_tokens = true) const;

  virtual int32_t vocab_size() const = 0;  // including added tokens
  // The vocabulary entry as stored (e.g. "▁Hello" or "Ġworld"); empty for an unknown id.
  virtual std::string id_to_piece(int32_t id) const = 0;
  virtual std::optional<int32_t> piece_to_id(std::string_view piece) const = 0;
  virtual bool is_special(int32_t id) const = 0;

  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  virtual std::optional<int32_t> pad_id() const = 0;
  virtual std::optional<int32_t> unk_id() const = 0;
  virtual std::string bos_token() const = 0;  // text form, for chat templates ("" when none)
  virtual std::string eos_token() const = 0;

  // From tokenizer_config.json; empty when the model has none.
  virtual const std::vector<NamedChatTemplate>& chat_templates() const = 0;
  virtual std::optional<int64_t> model_max_length() const = 0;
};

struct TokenizerOptions {
  // auto: tokenizer.json, else tokenizer.model, else vocab.json+merges.txt (or encoder.json+vocab.bpe).
  // slow: tokenizer.model, else vocab.json+merges.txt, else tokenizer.json. There is no Python
  // "slow vs fast" split here: both are native; "slow" only picks the files Transformers' slow classes use.
  std::string mode = "auto";
};

// Loads the tokenizer of a local model folder, or the one embedded in a .gguf file. Throws cypris::Error naming the file and the
// component when a file is malformed or uses something unsupported.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir, const TokenizerOptions& opts = {});

}  // namespace cypris
