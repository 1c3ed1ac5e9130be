// Hugging Face tokenizer.json (BPE model) and GPT-2 style vocab.json + merges.txt, both run by the
// same pipeline: normalizer -> pre-tokenizer -> BPE -> post-processor, decoder for the way back.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/hf_json_util.h"
#include "engine/tokenizer/tokenizer_base.h"

namespace cypris {

using json = nlohmann::json;

namespace {

// Qwen2's split pattern: the Llama 3 pattern with single digits.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  CYPRIS_CHECK(in.good(), "{}: cannot open the file", file.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json_file(const std::filesystem::path& file) {
  std::string text = read_file(file);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    CYPRIS_FAIL("{}: invalid JSON: {}", file.string(), e.what());
  }
}

bool is_llama_class(const std::string& c) {
  return c == "LlamaTokenizer" || c == "LlamaTokenizerFast" || c == "CodeLlamaTokenizer" ||
         c == "CodeLlamaTokenizerFast" || c == "GemmaTokenizer" || c == "GemmaTokenizerFast";
}

class BpeTokenizer : public TokenizerBase {
 public:
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_;
  std::unique_ptr<BpeModel> bpe_;

  void init_from_model() {
    std::vector<std::string> pieces(size_t(bpe_->size()));
    for (int32_t id = 0; id < bpe_->size(); ++id)
      if (const std::string* t = bpe_->id_to_token(id)) pieces[id] = *t;
    init_vocab(std::move(pieces), bpe_->size());
  }
  // BOS/EOS from tokenizer_config.json's add_bos_token/add_eos_token.
  void config_post_processor(const TokenizerConfig& cfg, bool default_bos) {
    std::vector<int32_t> prefix, suffix;
    if (cfg.add_bos_token.value_or(default_bos) && bos_id()) prefix.push_back(*bos_id());
    if (cfg.add_eos_token.value_or(false) && eos_id()) suffix.push_back(*eos_id());
    post_processor_ = hf::make_affix_post_processor(std::move(prefix), std::move(suffix));
  }

 protected:
  void encode_model(std::string_view text, bool at_start, std::vector<int32_t>& out) const override {
    if (!pre_) {
      bpe_->encode_word(text, out);
      return;
    }
    hf::PreTokens pieces{{std::string(text), at_start}};
    pre_->apply(pieces);
    for (const auto& p : pieces) bpe_->encode_word(p.text, out);
  }
  std::string normalize(std::string text) const override {
    return normalizer_ ? normalizer_->normalize(std::move(text)) : text;
  }
  std::optional<int32_t> model_token_to_id(std::string_view piece) const override { return bpe_->token_to_id(piece); }
};

AddedToken parse_added_token(const json& t, const std::string& where) {
  CYPRIS_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer(), "{}: each entry needs an integer 'id'",
               where);
  AddedToken a;
  a.id = t["id"].get<int32_t>();
  a.content = hf::get_string(t, "content", where);
  a.special = hf::get_bool(t, "special", where, false);
  a.lstrip = hf::get_bool(t, "lstrip", where, false);
  a.rstrip = hf::get_bool(t, "rstrip", where, false);
  a.single_word = hf::get_bool(t, "single_word", where, false);
  a.normalized = hf::get_bool(t, "normalized", where, !a.special);
  return a;
}

// "a b"; a line with more spaces goes to BpeModel whole, to be split with the vocabulary's help.
std::pair<std::string, std::string> split_merge(const std::string& line, const std::string& where, size_t index) {
  size_t sp = line.find(' ');
  CYPRIS_CHECK(sp != std::string::npos, "{}: merge {} '{}' is not two tokens separated by a space", where, index, line);
  if (line.find(' ', sp + 1) != std::string::npos) return {line, ""};
  CYPRIS_CHECK(sp > 0 && sp + 1 < line.size(), "{}: merge {} '{}' is not two tokens separated by a space", where, index,
               line);
  return {line.substr(0, sp), line.substr(sp + 1)};
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::filesystem::path& file, const TokenizerConfig& cfg) {
  const std::string where = file.string();
  json j = parse_json_file(file);
  CYPRIS_CHECK(j.is_object(), "{}: expected a JSON object at the top level", where);
  CYPRIS_CHECK(j.contains("model") && j["model"].is_object(), "{}: missing object 'model'", where);
  const json& m = j["model"];
  std::string type = m.contains("type") ? hf::get_string(m, "type", where + ": model") : "BPE";
  CYPRIS_CHECK(type == "BPE", "{}: model type '{}' is not supported; supported: BPE", where, type);
  const std::string mw = where + ": model";

  VocabList vocab;
  CYPRIS_CHECK(m.contains("vocab") && m["vocab"].is_object(), "{}: missing object 'vocab'", mw);
  vocab.reserve(m["vocab"].size());
  for (const auto& [tok, id] : m["vocab"].items()) {
    CYPRIS_CHECK(id.is_number_integer(), "{}: vocab id of '{}' must be an integer", mw, tok);
    vocab.emplace_back(tok, id.get<int32_t>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const json& jm = hf::get_array(m, "merges", mw);
  merges.reserve(jm.size());
  for (size_t i = 0; i < jm.size(); ++i) {
    const json& e = jm[i];
    if (e.is_string()) {
      merges.push_back(split_merge(e.get<std::string>(), mw, i));
    } else {
      CYPRIS_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                   "{}: merge {} must be \"a b\" or [\"a\", \"b\"]", mw, i);
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    }
  }
  BpeOptions opts;
  if (m.contains("unk_token") && m["unk_token"].is_string()) opts.unk_token = m["unk_token"].get<std::string>();
  opts.continuing_subword_prefix = hf::get_string(m, "continuing_subword_prefix", mw, "");
  opts.end_of_word_suffix = hf::get_string(m, "end_of_word_suffix", mw, "");
  opts.fuse_unk = hf::get_bool(m, "fuse_unk", mw, false);
  opts.byte_fallback = hf::get_bool(m, "byte_fallback", mw, false);
  opts.ignore_merges = hf::get_bool(m, "ignore_merges", mw, false);

  auto tok = std::make_unique<BpeTokenizer>();
  tok->bpe_ = std::make_unique<BpeModel>(std::move(vocab), merges, opts, mw);
  tok->init_from_model();
  tok->normalizer_ = hf::parse_normalizer(j.value("normalizer", json()), where + ": normalizer");
  tok->pre_ = hf::parse_pre_tokenizer(j.value("pre_tokenizer", json()), where + ": pre_tokenizer");
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    for (const auto& t : hf::get_array(j, "added_tokens", where))
      tok->add_token(parse_added_token(t, where + ": added_tokens"));
  }
  tok->apply_config(cfg);
  const BpeTokenizer* raw = tok.get();
  tok->set_post_processor(hf::parse_post_processor(j.value("post_processor", json()), where + ": post_processor",
                                                   [raw](const std::string& s) { return raw->piece_to_id(s); }));
  // Transformers' Llama/Gemma fast classes rebuild the post-processor from add_bos_token/add_eos_token.
  if (is_llama_class(cfg.tokenizer_class) && (cfg.add_bos_token || cfg.add_eos_token))
    tok->config_post_processor(cfg, true);
  tok->set_decoder(hf::parse_decoder(j.value("decoder", json()), where + ": decoder"));
  tok->finalize();
  return tok;
}

std::unique_ptr<Tokenizer> load_gpt2_files_tokenizer(const std::filesystem::path& vocab_file,
                                                     const std::filesystem::path& merges_file,
                                                     const TokenizerConfig& cfg) {
  json jv = parse_json_file(vocab_file);
  const std::string vw = vocab_file.string();
  CYPRIS_CHECK(jv.is_object(), "{}: expected an object of token -> id", vw);
  VocabList vocab;
  vocab.reserve(jv.size());
  for (const auto& [t, id] : jv.items()) {
    CYPRIS_CHECK(id.is_number_integer(), "{}: id of '{}' must be an integer", vw, t);
    vocab.emplace_back(t, id.get<int32_t>());
  }
  const std::string mw = merges_file.string();
  std::istringstream in(read_file(merges_file));
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (size_t n = 0; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 0 && line.rfind("#version", 0) == 0)) continue;
    merges.push_back(split_merge(line, mw, merges.size()));
  }
  auto tok = std::make_unique<BpeTokenizer>();
  tok->bpe_ = std::make_unique<BpeModel>(std::move(vocab), merges, BpeOptions{}, mw);
  tok->init_from_model();
  // The slow classes hard-code their pre-tokenization; Qwen2 adds NFC and its own split pattern.
  if (cfg.tokenizer_class == "Qwen2Tokenizer" || cfg.tokenizer_class == "Qwen2TokenizerFast") {
    tok->normalizer_ = hf::make_nfc_normalizer();
    std::vector<std::unique_ptr<hf::PreTokenizer>> parts;
    parts.push_back(hf::make_split_pre_tokenizer(kQwen2Pattern, "Qwen2 pattern"));
    parts.push_back(hf::make_byte_level_pre_tokenizer(false, false));
    tok->pre_ = hf::make_sequence_pre_tokenizer(std::move(parts));
  } else {
    tok->pre_ = hf::make_byte_level_pre_tokenizer(cfg.add_prefix_space.value_or(false), true);
  }
  tok->apply_config(cfg);
  tok->config_post_processor(cfg, false);
  tok->set_decoder(hf::make_byte_level_decoder());
  tok->set_slow_decode(true);
  tok->finalize();
  return tok;
}

std::unique_ptr<Tokenizer> make_byte_level_bpe_tokenizer(VocabList vocab,
                                                         const std::vector<std::pair<std::string, std::string>>& merges,
                                                         const std::vector<std::string>& split_patterns, bool nfc,
                                                         bool ignore_merges, const TokenizerConfig& cfg,
                                                         const std::string& where) {
  auto tok = std::make_unique<BpeTokenizer>();
  BpeOptions opts;
  opts.ignore_merges = ignore_merges;
  tok->bpe_ = std::make_unique<BpeModel>(std::move(vocab), merges, opts, where);
  tok->init_from_model();
  if (nfc) tok->normalizer_ = hf::make_nfc_normalizer();
  if (split_patterns.empty()) {
    tok->pre_ = hf::make_byte_level_pre_tokenizer(cfg.add_prefix_space.value_or(false), true);
  } else {
    std::vector<std::unique_ptr<hf::PreTokenizer>> parts;
    for (const auto& p : split_patterns) parts.push_back(hf::make_split_pre_tokenizer(p, where + ": split pattern"));
    parts.push_back(hf::make_byte_level_pre_tokenizer(cfg.add_prefix_space.value_or(false), false));
    tok->pre_ = hf::make_sequence_pre_tokenizer(std::move(parts));
  }
  tok->apply_config(cfg);
  tok->config_post_processor(cfg, false);
  tok->set_decoder(hf::make_byte_level_decoder());
  tok->finalize();
  return tok;
}

}  // namespace cypris
