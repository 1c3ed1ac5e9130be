// The pipeline stages of a Hugging Face tokenizer.json, re-created for encoding and for streaming
// decoding: normalizers, pre-tokenizers, post-processors and decoders, each parsed from its JSON.
// Decoders are streaming transducers so that one full decode and a token-by-token decode run the
// very same code and give the very same text.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cypris::hf {

// ---- normalizers -------------------------------------------------------------------------------
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string s) const = 0;
};
// where: "<file>: normalizer" style context for error messages.
std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& j, const std::string& where);

// ---- pre-tokenizers ----------------------------------------------------------------------------
struct PreToken {
  std::string text;
  bool at_start = false;  // begins at byte 0 of the text given to encode() (Metaspace prepend_scheme "first")
};
using PreTokens = std::vector<PreToken>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and may rewrite) every piece; empty pieces are dropped.
  virtual void apply(PreTokens& pieces) const = 0;
};
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j, const std::string& where);

// Building blocks the GPT-2 vocab/merges loader reuses.
std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(bool add_prefix_space, bool use_regex);
std::unique_ptr<PreTokenizer> make_split_pre_tokenizer(const std::string& regex, const std::string& where);
std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts);
std::unique_ptr<Normalizer> make_nfc_normalizer();
extern const char* const kGpt2Pattern;

// ---- post-processors ---------------------------------------------------------------------------
// Resolves a special token's text to its id (added tokens first, then the model vocabulary).
using TokenLookup = std::function<std::optional<int32_t>(const std::string&)>;

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens of a single sequence (add_special_tokens=true).
  virtual void process(std::vector<int32_t>& ids) const = 0;
  // True when the processor adds tokens at all (ByteLevel only trims offsets).
  virtual bool adds_tokens() const { return true; }
};
std::unique_ptr<PostProcessor> parse_post_processor(const nlohmann::json& j, const std::string& where,
                                                    const TokenLookup& lookup);
// Prefix and suffix ids around the sequence, for config-driven BOS/EOS.
std::unique_ptr<PostProcessor> make_affix_post_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

// ---- decoders ----------------------------------------------------------------------------------
// A decoder stage sees a stream of pieces. A piece starts a new token or continues the current one:
// after Fuse (or ByteLevel) the later stages see a single token that arrives in pieces.
struct DecodePiece {
  std::string text;
  bool new_token = true;
};

class DecoderStage {
 public:
  virtual ~DecoderStage() = default;
  virtual void push(DecodePiece piece, std::vector<DecodePiece>& out) = 0;
  // End of the token stream: release whatever is held.
  virtual void finish(std::vector<DecodePiece>& out) {}
  // Mid-stream: release what is held only because a later token might join it but is already
  // whole text (a run of byte pieces that forms complete characters); keep everything else.
  virtual void release_complete(std::vector<DecodePiece>& out) {}
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void make_stages(std::vector<std::unique_ptr<DecoderStage>>& stages) const = 0;
};
std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& j, const std::string& where);
std::unique_ptr<Decoder> make_byte_level_decoder();
// Llama/SentencePiece: "▁" -> " ", <0xXX> byte pieces, fuse, strip one leading space.
std::unique_ptr<Decoder> make_sentencepiece_decoder();

// Runs tokens through a chain of stages and collects the text.
class DecodeChain {
 public:
  explicit DecodeChain(const Decoder* decoder);  // nullptr: no decoder (tokens joined as they are)
  void push(std::string_view token, std::string& out);
  void finish(std::string& out);
  // The held-back text that is already complete (DecoderStage::release_complete), stream continuing.
  void release_complete(std::string& out);
  bool empty_so_far() const { return !emitted_any_; }

 private:
  void run_from(size_t stage, std::vector<DecodePiece>& pieces, std::string& out);
  std::vector<std::unique_ptr<DecoderStage>> stages_;
  bool emitted_any_ = false;
  bool joined_any_ = false;
  bool has_decoder_ = false;
};

}  // namespace cypris::hf
