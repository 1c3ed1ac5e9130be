// Shared machinery of the built-in tokenizers (internal to engine/tokenizer): added tokens split out
// of the text before the model, the post-processor, special-token ids from tokenizer_config.json,
// and decoding through a decoder chain, in one piece or streamed. Subclasses supply the model:
// normalisation and encoding of plain text segments, and the pieces of model ids.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/hf_components.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// What tokenizer_config.json says (all optional).
struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::optional<bool> add_bos_token, add_eos_token, add_prefix_space;
  std::vector<NamedChatTemplate> chat_templates;
  std::optional<int64_t> model_max_length;
  std::vector<AddedToken> added_tokens;  // added_tokens_decoder
  std::string tokenizer_class;
};
// Reads dir/tokenizer_config.json when present; Error naming the file and field when malformed.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& dir);

class TokenizerBase : public Tokenizer {
 public:
  TokenizerBase();
  ~TokenizerBase() override;
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true,
                     bool spaces_between_special_tokens = true) const override;
  std::unique_ptr<DecodeStream> decode_stream(bool skip_special_tokens = true,
                                              bool spaces_between_special_tokens = true) const override;

  int32_t vocab_size() const override { return int32_t(pieces_.size()); }
  std::string id_to_piece(int32_t id) const override;
  std::optional<int32_t> piece_to_id(std::string_view piece) const override;
  bool is_special(int32_t id) const override;

  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::optional<int32_t> pad_id() const override { return pad_id_; }
  std::optional<int32_t> unk_id() const override { return unk_id_; }
  std::string bos_token() const override { return bos_token_; }
  std::string eos_token() const override { return eos_token_; }
  const std::vector<NamedChatTemplate>& chat_templates() const override { return chat_templates_; }
  std::optional<int64_t> model_max_length() const override { return model_max_length_; }

  // Setup, by the loaders once the model is ready: pieces of every model id (index = id, empty when
  // the id has none) and the number of ids the model itself has.
  void init_vocab(std::vector<std::string> model_pieces, int32_t model_size);
  // Adds (or overrides) an added token.
  void add_token(const AddedToken& t);
  // Applies tokenizer_config.json: added tokens, special tokens, chat templates, max length.
  void apply_config(const TokenizerConfig& cfg);
  // Finishes setup (token matchers). Call after the last add_token().
  void finalize();

  void set_post_processor(std::unique_ptr<hf::PostProcessor> p) { post_processor_ = std::move(p); }
  void set_decoder(std::unique_ptr<hf::Decoder> d) { decoder_ = std::move(d); }
  void set_slow_decode(bool slow) { slow_decode_ = slow; }

 protected:
  // Text between added tokens, after normalize(): append its ids. at_start: it begins the input.
  virtual void encode_model(std::string_view text, bool at_start, std::vector<int32_t>& out) const = 0;
  virtual std::string normalize(std::string text) const { return text; }
  virtual std::optional<int32_t> model_token_to_id(std::string_view piece) const = 0;

  std::unique_ptr<hf::PostProcessor> post_processor_;
  std::unique_ptr<hf::Decoder> decoder_;
  // Transformers' slow classes join "legacy" added tokens (not special, or beyond the model's
  // vocabulary) to the text around them with spaces when spaces_between_special_tokens is set; the
  // fast (tokenizer.json) ones ignore the flag, as vLLM and Aphrodite do.
  bool slow_decode_ = false;

 private:
  friend class BaseDecodeStream;
  struct Matcher;
  struct Segment {
    std::string_view text;
    int32_t added_id;  // -1: plain text
    size_t offset;
  };
  void split_added(std::string_view text, const Matcher& m, std::vector<Segment>& out) const;
  bool is_legacy_added(int32_t id) const;

  std::vector<std::string> pieces_;  // id -> piece (added tokens override model pieces)
  int32_t model_size_ = 0;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::vector<char> special_;
  std::unique_ptr<Matcher> raw_matcher_, normalized_matcher_;

  std::optional<int32_t> bos_id_, eos_id_, pad_id_, unk_id_;
  std::string bos_token_, eos_token_;
  std::vector<NamedChatTemplate> chat_templates_;
  std::optional<int64_t> model_max_length_;
};

// The concrete loaders.
std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::filesystem::path& file, const TokenizerConfig& cfg);
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& file, const TokenizerConfig& cfg);
// A SentencePiece model from a serialized ModelProto (where: its source, for messages).
std::unique_ptr<Tokenizer> load_sentencepiece_proto(const std::string& proto, const std::string& where,
                                                    const TokenizerConfig& cfg);
// A byte-level BPE tokenizer from a vocabulary and merges in memory (GGUF's `gpt2` vocabularies):
// split_patterns run in order before the byte-level mapping; nfc normalizes first; ignore_merges
// takes a word that is itself a token whole (Llama 3).
std::unique_ptr<Tokenizer> make_byte_level_bpe_tokenizer(VocabList vocab,
                                                         const std::vector<std::pair<std::string, std::string>>& merges,
                                                         const std::vector<std::string>& split_patterns, bool nfc,
                                                         bool ignore_merges, const TokenizerConfig& cfg,
                                                         const std::string& where);
std::unique_ptr<Tokenizer> load_gpt2_files_tokenizer(const std::filesystem::path& vocab,
                                                     const std::filesystem::path& merges, const TokenizerConfig& cfg);

}  // namespace cypris
