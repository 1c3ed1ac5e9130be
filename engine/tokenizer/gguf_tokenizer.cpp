// The tokenizer embedded in a GGUF file, built on the existing tokenizers: a `llama` vocabulary
// (SentencePiece-style: tokens, scores, token types, <0xNN> byte fallback) becomes a SentencePiece
// ModelProto run by libsentencepiece; a `gpt2` vocabulary (byte-level BPE with merges) runs on the
// BPE model with the pre-tokenizer tokenizer.ggml.pre names. Special ids, add_bos/add_eos and the
// chat templates come from the tokenizer.* keys.
#include "engine/tokenizer/gguf_tokenizer.h"

#include <fmt/format.h>

#include <cstring>

#include "engine/common/error.h"
#include "engine/tokenizer/tokenizer_base.h"

namespace cypris {
namespace {

// llama.cpp's token types (the same numbers as SentencePiece's piece types).
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The pre-tokenizers of byte-level vocabularies, by tokenizer.ggml.pre. Add a row for another
// model family: its split regexes (from its tokenizer.json), whether it normalizes to NFC, and
// whether its BPE takes a word that is a token whole before merging (tokenizer.json's ignore_merges).
struct PreTokenizerRow {
  std::string_view name;
  std::vector<std::string> patterns;  // empty: GPT-2's own pattern
  bool nfc;
  bool ignore_merges;
};
const std::vector<PreTokenizerRow>& pre_tokenizers() {
  static const std::string kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::vector<PreTokenizerRow> kRows = {
      {"default", {}, false, false},
      {"gpt-2", {}, false, false},
      {"llama-bpe", {kLlama3}, false, true},
      {"llama3", {kLlama3}, false, true},
      {"smaug-bpe", {kLlama3}, false, false},
      {"qwen2", {kQwen2}, true, false},
  };
  return kRows;
}

// ---- a minimal protobuf writer for SentencePiece's ModelProto ------------------------------------
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire); }
void put_int(std::string& out, int field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));
}
void put_bytes(std::string& out, int field, std::string_view b) {
  put_key(out, field, 2);
  put_varint(out, b.size());
  out.append(b);
}
void put_float(std::string& out, int field, float f) {
  put_key(out, field, 5);
  char b[4];
  std::memcpy(b, &f, 4);  // little-endian hosts only (as the GGUF reader)
  out.append(b, 4);
}

std::string token_at(const GgufValue& tokens, std::optional<int64_t> id) {
  if (!id || *id < 0 || static_cast<uint64_t>(*id) >= tokens.size()) return "";
  return std::string(tokens.string_at(static_cast<uint64_t>(*id)));
}

// The special tokens, add_bos/add_eos and chat templates shared by both vocabularies.
TokenizerConfig gguf_tokenizer_config(const GgufModel& m, const GgufValue& tokens, bool default_add_bos) {
  TokenizerConfig cfg;
  auto id_key = [&](const char* key) -> std::optional<std::string> {
    auto id = m.get_int(key);
    if (!id) return std::nullopt;
    CYPRIS_CHECK(*id >= 0 && static_cast<uint64_t>(*id) < tokens.size(),
                 "{}: metadata '{}' is {}, outside the vocabulary of {} tokens", m.describe(), key, *id, tokens.size());
    return token_at(tokens, id);
  };
  cfg.bos_token = id_key("tokenizer.ggml.bos_token_id");
  cfg.eos_token = id_key("tokenizer.ggml.eos_token_id");
  cfg.unk_token = id_key("tokenizer.ggml.unknown_token_id");
  cfg.pad_token = id_key("tokenizer.ggml.padding_token_id");
  cfg.add_bos_token = m.get_bool("tokenizer.ggml.add_bos_token").value_or(default_add_bos);
  cfg.add_eos_token = m.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (auto t = m.get_string("tokenizer.chat_template")) cfg.chat_templates.push_back({"default", *t});
  // Further named templates: tokenizer.chat_templates lists the names, tokenizer.chat_template.NAME holds each.
  if (const GgufValue* names = m.get_array("tokenizer.chat_templates", GgufType::String)) {
    for (uint64_t i = 0; i < names->size(); ++i) {
      const std::string name(names->string_at(i));
      if (auto t = m.get_string("tokenizer.chat_template." + name)) cfg.chat_templates.push_back({name, *t});
    }
  }
  if (auto n = m.get_int(std::string(gguf_architecture_name(m)) + ".context_length"); n && *n > 0) {
    cfg.model_max_length = *n;
  }
  return cfg;
}

std::unique_ptr<Tokenizer> llama_vocab(const GgufModel& m, const GgufValue& tokens) {
  const uint64_t n = tokens.size();
  const GgufValue* scores = m.get_array("tokenizer.ggml.scores", GgufType::F32);
  const GgufValue* types = m.get_array("tokenizer.ggml.token_type", GgufType::I32);
  CYPRIS_CHECK(!scores || scores->size() == n, "{}: 'tokenizer.ggml.scores' has {} entries for {} tokens", m.describe(),
               scores ? scores->size() : 0, n);
  CYPRIS_CHECK(!types || types->size() == n, "{}: 'tokenizer.ggml.token_type' has {} entries for {} tokens",
               m.describe(), types ? types->size() : 0, n);
  TokenizerConfig cfg = gguf_tokenizer_config(m, tokens, true);
  std::string proto;
  bool has_bytes = false;
  for (uint64_t i = 0; i < n; ++i) {
    int64_t type = types ? types->int_at(i) : kNormal;
    CYPRIS_CHECK(type >= kNormal && type <= kByte, "{}: 'tokenizer.ggml.token_type' of token {} is {} (allowed: 1-6)",
                 m.describe(), i, type);
    has_bytes |= type == kByte;
    std::string piece;
    put_bytes(piece, 1, tokens.string_at(i));
    put_float(piece, 2, scores ? static_cast<float>(scores->double_at(i)) : 0.0f);
    put_int(piece, 3, type);
    put_bytes(proto, 1, piece);
  }
  // TrainerSpec: the model type (BPE), byte fallback and the special pieces; NormalizerSpec: no
  // normalization beyond the dummy-prefix space and "▁" for spaces, as llama.cpp's tokenizer does.
  std::string trainer;
  put_int(trainer, 3, 2);  // model_type = BPE
  put_int(trainer, 4, static_cast<int64_t>(n));
  if (has_bytes) put_int(trainer, 35, 1);
  auto special = [&](int id_field, int piece_field, const char* key, std::optional<std::string>& text) {
    auto id = m.get_int(key);
    put_int(trainer, id_field, id.value_or(-1));
    if (text) put_bytes(trainer, piece_field, *text);
  };
  special(40, 45, "tokenizer.ggml.unknown_token_id", cfg.unk_token);
  special(41, 46, "tokenizer.ggml.bos_token_id", cfg.bos_token);
  special(42, 47, "tokenizer.ggml.eos_token_id", cfg.eos_token);
  special(43, 48, "tokenizer.ggml.padding_token_id", cfg.pad_token);
  put_bytes(proto, 2, trainer);
  std::string norm;
  put_bytes(norm, 1, "identity");
  put_int(norm, 3, m.get_bool("tokenizer.ggml.add_space_prefix").value_or(true) ? 1 : 0);
  put_int(norm, 4, m.get_bool("tokenizer.ggml.remove_extra_whitespaces").value_or(false) ? 1 : 0);
  put_int(norm, 5, 1);
  put_bytes(proto, 3, norm);
  return load_sentencepiece_proto(proto, m.describe(), cfg);
}

std::unique_ptr<Tokenizer> gpt2_vocab(const GgufModel& m, const GgufValue& tokens) {
  const uint64_t n = tokens.size();
  const GgufValue* types = m.get_array("tokenizer.ggml.token_type", GgufType::I32);
  CYPRIS_CHECK(!types || types->size() == n, "{}: 'tokenizer.ggml.token_type' has {} entries for {} tokens",
               m.describe(), types ? types->size() : 0, n);
  const GgufValue* merges_kv = m.get_array("tokenizer.ggml.merges", GgufType::String);
  CYPRIS_CHECK(merges_kv != nullptr, "{}: a gpt2 vocabulary needs metadata 'tokenizer.ggml.merges'", m.describe());
  const std::string pre = m.get_string("tokenizer.ggml.pre").value_or("default");
  const PreTokenizerRow* row = nullptr;
  std::string known;
  for (const auto& r : pre_tokenizers()) {
    if (r.name == pre) row = &r;
    known += (known.empty() ? "" : ", ") + std::string(r.name);
  }
  CYPRIS_CHECK(row != nullptr, "{}: metadata 'tokenizer.ggml.pre' is '{}'; supported pre-tokenizers: {}", m.describe(),
               pre, known);
  TokenizerConfig cfg = gguf_tokenizer_config(m, tokens, false);
  VocabList vocab;
  vocab.reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t type = types ? types->int_at(i) : kNormal;
    const std::string text(tokens.string_at(i));
    // Added tokens of the original tokenizer: CONTROL ones are special, USER_DEFINED ones are not.
    if (type == kControl || type == kUserDefined) {
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = text;
      a.special = type == kControl;
      a.normalized = !a.special;
      cfg.added_tokens.push_back(a);
    }
    vocab.emplace_back(text, static_cast<int32_t>(i));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(static_cast<size_t>(merges_kv->size()));
  for (uint64_t i = 0; i < merges_kv->size(); ++i) {
    const std::string_view line = merges_kv->string_at(i);
    const size_t sp = line.find(' ');
    CYPRIS_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size(),
                 "{}: 'tokenizer.ggml.merges' entry {} '{}' is not two tokens separated by a space", m.describe(), i,
                 line);
    if (line.find(' ', sp + 1) != std::string_view::npos) {
      merges.emplace_back(std::string(line), "");  // BpeModel splits it with the vocabulary's help
    } else {
      merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
    }
  }
  return make_byte_level_bpe_tokenizer(std::move(vocab), merges, row->patterns, row->nfc, row->ignore_merges, cfg,
                                       m.describe() + ": tokenizer.ggml");
}

}  // namespace

std::string_view gguf_architecture_name(const GgufModel& m) {
  const GgufValue* v = m.find("general.architecture");
  return v && v->type == GgufType::String ? v->as_string() : std::string_view();
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufModel& m) {
  const auto model = m.get_string("tokenizer.ggml.model");
  CYPRIS_CHECK(model.has_value(), "{}: the file has no tokenizer (metadata 'tokenizer.ggml.model' is missing); pass "
               "--tokenizer",
               m.describe());
  const GgufValue* tokens = m.get_array("tokenizer.ggml.tokens", GgufType::String);
  CYPRIS_CHECK(tokens != nullptr && tokens->size() > 0, "{}: metadata 'tokenizer.ggml.tokens' is missing or empty",
               m.describe());
  CYPRIS_CHECK(tokens->size() <= (1u << 24), "{}: 'tokenizer.ggml.tokens' has {} tokens (at most 16777216)",
               m.describe(), tokens->size());
  if (*model == "llama") return llama_vocab(m, *tokens);
  if (*model == "gpt2") return gpt2_vocab(m, *tokens);
  CYPRIS_FAIL("{}: tokenizer model '{}' (tokenizer.ggml.model) is not supported; supported: llama, gpt2", m.describe(),
              *model);
}

}  // namespace cypris
