// load_tokenizer(): picks the tokenizer files of a model folder, reads tokenizer_config.json, and
// the generic DecodeStream for Tokenizer implementations without their own.
#include "engine/tokenizer/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/loader/gguf.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/tokenizer_base.h"

namespace cypris {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// "bos_token": "<s>", or an AddedToken object {"content": "<s>", ...}, or null.
std::optional<std::string> token_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  CYPRIS_FAIL("{}: '{}' must be a string or an object with a string 'content'", where, key);
}

std::optional<bool> bool_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  CYPRIS_CHECK(it->is_boolean(), "{}: '{}' must be true or false", where, key);
  return it->get<bool>();
}

// Forwards to the first decode of everything pushed so far; emits what grew at the end, holding
// back text that ends in U+FFFD (a character still being completed).
class RedecodeStream : public DecodeStream {
 public:
  RedecodeStream(const Tokenizer& tok, bool skip, bool spaces) : tok_(tok), skip_(skip), spaces_(spaces) {}
  std::string push(int32_t id) override {
    ids_.push_back(id);
    std::string text = tok_.decode(ids_, skip_, spaces_);
    if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return "";
    return take(text);
  }
  std::string finish() override { return take(tok_.decode(ids_, skip_, spaces_)); }

 private:
  std::string take(const std::string& text) {
    if (text.size() <= emitted_ || text.compare(0, emitted_, sent_) != 0) return "";
    std::string delta = text.substr(emitted_);
    sent_ = text;
    emitted_ = text.size();
    return delta;
  }
  const Tokenizer& tok_;
  bool skip_, spaces_;
  std::vector<int32_t> ids_;
  std::string sent_;
  size_t emitted_ = 0;
};

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  CYPRIS_CHECK(in.good(), "{}: cannot open the file", file.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json_object(const fs::path& file) {
  json j;
  try {
    j = json::parse(read_text(file));
  } catch (const json::exception& e) {
    CYPRIS_FAIL("{}: invalid JSON: {}", file.string(), e.what());
  }
  CYPRIS_CHECK(j.is_object(), "{}: expected a JSON object at the top level", file.string());
  return j;
}

void parse_chat_templates(const json& value, const std::string& where, std::vector<NamedChatTemplate>& out) {
  if (value.is_string()) {
    out.push_back({"default", value.get<std::string>()});
    return;
  }
  CYPRIS_CHECK(value.is_array(), "{}: 'chat_template' must be a string or a list of {{\"name\", \"template\"}}", where);
  for (const auto& t : value) {
    CYPRIS_CHECK(t.is_object() && t.contains("name") && t["name"].is_string() && t.contains("template") &&
                     t["template"].is_string(),
                 "{}: each 'chat_template' entry needs string 'name' and 'template'", where);
    out.push_back({t["name"].get<std::string>(), t["template"].get<std::string>()});
  }
}

// Classes whose slow (Python) versions read vocab.json + merges.txt with GPT-2 pre-tokenization
// (Qwen2 with its own pattern and NFC): only for these does mode "slow" prefer those files.
bool is_gpt2_files_class(std::string c) {
  if (c.size() > 4 && c.compare(c.size() - 4, 4, "Fast") == 0) c.resize(c.size() - 4);
  return c == "GPT2Tokenizer" || c == "Qwen2Tokenizer" || c == "CodeGenTokenizer" || c == "GPTNeoXTokenizer" ||
         c == "BartTokenizer" || c == "RobertaTokenizer";
}

}  // namespace

std::unique_ptr<DecodeStream> Tokenizer::decode_stream(bool skip_special_tokens,
                                                       bool spaces_between_special_tokens) const {
  return std::make_unique<RedecodeStream>(*this, skip_special_tokens, spaces_between_special_tokens);
}

TokenizerConfig read_tokenizer_config(const fs::path& dir) {
  TokenizerConfig cfg;
  fs::path file = dir / "tokenizer_config.json";
  json j = fs::exists(file) ? read_json_object(file) : json::object();
  const std::string where = file.string();
  cfg.bos_token = token_field(j, "bos_token", where);
  cfg.eos_token = token_field(j, "eos_token", where);
  cfg.pad_token = token_field(j, "pad_token", where);
  cfg.unk_token = token_field(j, "unk_token", where);
  cfg.add_bos_token = bool_field(j, "add_bos_token", where);
  cfg.add_eos_token = bool_field(j, "add_eos_token", where);
  cfg.add_prefix_space = bool_field(j, "add_prefix_space", where);
  if (j.contains("tokenizer_class") && j["tokenizer_class"].is_string())
    cfg.tokenizer_class = j["tokenizer_class"].get<std::string>();

  if (auto it = j.find("chat_template"); it != j.end() && !it->is_null())
    parse_chat_templates(*it, where, cfg.chat_templates);
  // Newer Transformers save the template beside the config.
  if (cfg.chat_templates.empty() && fs::exists(dir / "chat_template.jinja")) {
    cfg.chat_templates.push_back({"default", read_text(dir / "chat_template.jinja")});
  } else if (cfg.chat_templates.empty() && fs::exists(dir / "chat_template.json")) {
    json ct = read_json_object(dir / "chat_template.json");
    if (ct.contains("chat_template") && !ct["chat_template"].is_null())
      parse_chat_templates(ct["chat_template"], (dir / "chat_template.json").string(), cfg.chat_templates);
  }
  // Older models name their special tokens in special_tokens_map.json only.
  if (fs::exists(dir / "special_tokens_map.json")) {
    fs::path map_file = dir / "special_tokens_map.json";
    json m = read_json_object(map_file);
    const std::string mw = map_file.string();
    if (!cfg.bos_token) cfg.bos_token = token_field(m, "bos_token", mw);
    if (!cfg.eos_token) cfg.eos_token = token_field(m, "eos_token", mw);
    if (!cfg.pad_token) cfg.pad_token = token_field(m, "pad_token", mw);
    if (!cfg.unk_token) cfg.unk_token = token_field(m, "unk_token", mw);
  }
  if (auto it = j.find("model_max_length"); it != j.end() && !it->is_null()) {
    CYPRIS_CHECK(it->is_number(), "{}: 'model_max_length' must be a number", where);
    // Transformers writes 1e30 for "no limit".
    double v = it->get<double>();
    if (v > 0 && v < 1e18) cfg.model_max_length = int64_t(v);
  }
  if (auto it = j.find("added_tokens_decoder"); it != j.end() && !it->is_null()) {
    CYPRIS_CHECK(it->is_object(), "{}: 'added_tokens_decoder' must be an object of id -> token", where);
    for (const auto& [key, t] : it->items()) {
      AddedToken a;
      try {
        size_t used = 0;
        a.id = std::stoi(key, &used);
        CYPRIS_CHECK(used == key.size() && a.id >= 0, "");
      } catch (const std::exception&) {
        CYPRIS_FAIL("{}: added_tokens_decoder key '{}' is not a token id", where, key);
      }
      CYPRIS_CHECK(t.is_object() && t.contains("content") && t["content"].is_string(),
                   "{}: added_tokens_decoder '{}' needs a string 'content'", where, key);
      a.content = t["content"].get<std::string>();
      a.special = t.value("special", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.single_word = t.value("single_word", false);
      a.normalized = t.value("normalized", !a.special);
      cfg.added_tokens.push_back(std::move(a));
    }
  }
  return cfg;
}

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& dir, const TokenizerOptions& opts) {
  if (is_gguf_path(dir) && !fs::is_directory(dir)) return load_gguf_tokenizer(GgufModel(dir));
  CYPRIS_CHECK(fs::is_directory(dir), "tokenizer folder '{}' does not exist or is not a directory", dir.string());
  CYPRIS_CHECK(opts.mode == "auto" || opts.mode == "slow",
               "tokenizer mode '{}' is not supported; supported: auto, slow", opts.mode);
  TokenizerConfig cfg = read_tokenizer_config(dir);
  fs::path json_file = dir / "tokenizer.json";
  fs::path spm_file = dir / "tokenizer.model";
  fs::path vocab, merges;
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
    vocab = dir / "vocab.json";
    merges = dir / "merges.txt";
  } else if (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe")) {
    vocab = dir / "encoder.json";  // OpenAI's names for the same two files
    merges = dir / "vocab.bpe";
  }
  bool has_json = fs::exists(json_file), has_spm = fs::exists(spm_file), has_bpe = !vocab.empty();
  if (opts.mode == "slow") {
    if (has_spm) return load_sentencepiece_tokenizer(spm_file, cfg);
    // vocab/merges files say nothing about the split pattern: use them when the class is known.
    if (has_bpe && (!has_json || is_gpt2_files_class(cfg.tokenizer_class)))
      return load_gpt2_files_tokenizer(vocab, merges, cfg);
    if (has_json) return load_hf_tokenizer_json(json_file, cfg);
  } else {
    if (has_json && has_spm) {
      // A tokenizer.json this loader cannot run (a Unigram model, say) need not stop a model that
      // also ships its SentencePiece file.
      try {
        return load_hf_tokenizer_json(json_file, cfg);
      } catch (const Error& e) {
        LOG_WARN("{}; using {} instead", e.what(), spm_file.string());
        return load_sentencepiece_tokenizer(spm_file, cfg);
      }
    }
    if (has_json) return load_hf_tokenizer_json(json_file, cfg);
    if (has_spm) return load_sentencepiece_tokenizer(spm_file, cfg);
    if (has_bpe) {
      if (!is_gpt2_files_class(cfg.tokenizer_class))
        LOG_WARN("{}: tokenizer class '{}' is not a known GPT-2-style class; using GPT-2 pre-tokenization for {}",
                 dir.string(), cfg.tokenizer_class, vocab.filename().string());
      return load_gpt2_files_tokenizer(vocab, merges, cfg);
    }
  }
  CYPRIS_FAIL(
      "{}: no tokenizer found (looked for tokenizer.json, tokenizer.model, vocab.json + merges.txt, "
      "encoder.json + vocab.bpe)",
      dir.string());
}

}  // namespace cypris
