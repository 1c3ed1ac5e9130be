// Decoders (as streaming stages) and post-processors of tokenizer.json. See hf_components.h.
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/tokenizer/hf_components.h"
#include "engine/tokenizer/hf_json_util.h"
#include "engine/tokenizer/unicode.h"

namespace cypris::hf {

using json = nlohmann::json;

namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

// Replace a literal pattern; a pattern longer than one character may straddle the pieces of one
// token, so the tail that could begin a match is held until the token continues or ends.
class ReplaceStage : public DecoderStage {
 public:
  ReplaceStage(std::string pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void push(DecodePiece piece, std::vector<DecodePiece>& out) override {
    if (piece.new_token) flush(out);
    bool first = held_.empty() && piece.new_token;
    held_ += piece.text;
    held_new_ = held_new_ || first;
    std::string done;
    size_t pos = 0;
    for (size_t p = held_.find(pattern_); p != std::string::npos; p = held_.find(pattern_, pos)) {
      done.append(held_, pos, p - pos);
      done += content_;
      pos = p + pattern_.size();
    }
    // Keep the longest tail that is a proper prefix of the pattern.
    size_t keep = 0;
    for (size_t k = std::min(pattern_.size() - 1, held_.size() - pos); k > 0; --k) {
      if (held_.compare(held_.size() - k, k, pattern_, 0, k) == 0) {
        keep = k;
        break;
      }
    }
    done.append(held_, pos, held_.size() - pos - keep);
    held_.erase(0, held_.size() - keep);
    emit(std::move(done), out);
  }
  void finish(std::vector<DecodePiece>& out) override { flush(out); }

 private:
  void emit(std::string text, std::vector<DecodePiece>& out) {
    if (text.empty() && !held_new_) return;
    out.push_back({std::move(text), held_new_});
    held_new_ = false;
  }
  void flush(std::vector<DecodePiece>& out) {
    if (!held_.empty() || held_new_) emit(std::move(held_), out);
    held_.clear();
  }
  std::string pattern_, content_, held_;
  bool held_new_ = false;
};

// Runs of <0xXX> tokens become their bytes when those form valid UTF-8, else one U+FFFD per byte.
class ByteFallbackStage : public DecoderStage {
 public:
  void push(DecodePiece piece, std::vector<DecodePiece>& out) override {
    const std::string& t = piece.text;
    if (piece.new_token && t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && isxdigit(uint8_t(t[3])) &&
        isxdigit(uint8_t(t[4]))) {
      bytes_.push_back(char(std::stoi(t.substr(3, 2), nullptr, 16)));
      return;
    }
    flush(out);
    out.push_back(std::move(piece));
  }
  void finish(std::vector<DecodePiece>& out) override { flush(out); }
  void release_complete(std::vector<DecodePiece>& out) override {
    if (unicode::is_valid_utf8(bytes_)) flush(out);  // an incomplete character waits for its bytes
  }

 private:
  void flush(std::vector<DecodePiece>& out) {
    if (bytes_.empty()) return;
    if (unicode::is_valid_utf8(bytes_)) {
      out.push_back({bytes_, true});
    } else {
      for (size_t i = 0; i < bytes_.size(); ++i) out.push_back({kReplacementChar, true});
    }
    bytes_.clear();
  }
  std::string bytes_;
};

class FuseStage : public DecoderStage {
 public:
  void push(DecodePiece piece, std::vector<DecodePiece>& out) override {
    piece.new_token = first_;
    first_ = false;
    out.push_back(std::move(piece));
  }

 private:
  bool first_ = true;
};

// Strips up to `start` leading and `stop` trailing `content` characters of every token.
class StripStage : public DecoderStage {
 public:
  StripStage(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void push(DecodePiece piece, std::vector<DecodePiece>& out) override {
    if (piece.new_token) {
      held_.clear();
      lead_left_ = start_;
    }
    std::string_view t = piece.text;
    while (lead_left_ > 0 && !t.empty()) {
      if (t.compare(0, content_.size(), content_) == 0) {
        t.remove_prefix(content_.size());
        --lead_left_;
      } else {
        lead_left_ = 0;
      }
    }
    if (!t.empty()) lead_left_ = 0;
    std::string text;
    if (stop_ == 0) {
      text = t;
    } else {
      // Hold the trailing run of `content` (at most stop_ of them), emit everything before it.
      std::string all = held_ + std::string(t);
      size_t end = all.size();
      size_t count = 0;
      while (end >= content_.size() && all.compare(end - content_.size(), content_.size(), content_) == 0) {
        end -= content_.size();
        ++count;
      }
      if (count > stop_) {
        end += (count - stop_) * content_.size();
        count = stop_;
      }
      text = all.substr(0, end);
      held_ = all.substr(end);
    }
    if (!text.empty() || piece.new_token) out.push_back({std::move(text), piece.new_token});
  }

 private:
  std::string content_;
  size_t start_, stop_;
  size_t lead_left_ = 0;
  std::string held_;
};

class MetaspaceStage : public DecoderStage {
 public:
  MetaspaceStage(std::string rep, bool drop_in_first) : rep_(std::move(rep)), drop_in_first_(drop_in_first) {}
  void push(DecodePiece piece, std::vector<DecodePiece>& out) override {
    if (piece.new_token) ++index_;
    std::string t;
    const std::string& s = piece.text;
    for (size_t i = 0; i < s.size();) {
      if (s.compare(i, rep_.size(), rep_) == 0) {
        if (!(index_ == 1 && drop_in_first_)) t += ' ';
        i += rep_.size();
      } else {
        t += s[i++];
      }
    }
    out.push_back({std::move(t), piece.new_token});
  }

 private:
  std::string rep_;
  bool drop_in_first_;
  size_t index_ = 0;
};

// Maps each token's characters back to bytes (a token with an unmapped character keeps its own
// bytes), joins everything and decodes it lossily: one output token arriving in pieces.
class ByteLevelStage : public DecoderStage {
 public:
  void push(DecodePiece piece, std::vector<DecodePiece>& out) override {
    std::string bytes;
    bytes.reserve(piece.text.size());
    const std::string& s = piece.text;
    bool ok = true;
    for (size_t i = 0; i < s.size() && ok;) {
      int b = unicode::char_to_byte(unicode::next_cp(s, i));
      if (b < 0) {
        ok = false;
      } else {
        bytes.push_back(char(b));
      }
    }
    std::string text;
    utf8_.push(ok ? bytes : s, text);
    emit(std::move(text), out);
  }
  void finish(std::vector<DecodePiece>& out) override {
    std::string text;
    utf8_.finish(text);
    emit(std::move(text), out);
  }

 private:
  void emit(std::string text, std::vector<DecodePiece>& out) {
    if (text.empty()) return;
    out.push_back({std::move(text), first_});
    first_ = false;
  }
  unicode::Utf8StreamDecoder utf8_;
  bool first_ = true;
};

class StageDecoder : public Decoder {
 public:
  using Factory = std::function<std::unique_ptr<DecoderStage>()>;
  explicit StageDecoder(Factory f) : factory_(std::move(f)) {}
  void make_stages(std::vector<std::unique_ptr<DecoderStage>>& stages) const override { stages.push_back(factory_()); }

 private:
  Factory factory_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void make_stages(std::vector<std::unique_ptr<DecoderStage>>& stages) const override {
    for (const auto& p : parts_) p->make_stages(stages);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

template <typename Stage, typename... Args>
std::unique_ptr<Decoder> stage_decoder(Args... args) {
  return std::make_unique<StageDecoder>([=] { return std::make_unique<Stage>(args...); });
}

// ---- post-processors ----

class AffixProcessor : public PostProcessor {
 public:
  AffixProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }
  bool adds_tokens() const override { return !prefix_.empty() || !suffix_.empty(); }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class NoopProcessor : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
  bool adds_tokens() const override { return false; }
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->process(ids);
  }
  bool adds_tokens() const override {
    for (const auto& p : parts_)
      if (p->adds_tokens()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

int32_t lookup_token(const json& j, const char* key, const std::string& where, const TokenLookup& lookup) {
  auto it = j.find(key);
  CYPRIS_CHECK(it != j.end(), "{}: missing field '{}'", where, key);
  // RoBERTa/BERT store [token, id].
  if (it->is_array() && it->size() == 2 && (*it)[1].is_number_integer()) return (*it)[1].get<int32_t>();
  CYPRIS_CHECK(it->is_string(), "{}: field '{}' must be a token", where, key);
  auto id = lookup(it->get<std::string>());
  CYPRIS_CHECK(id.has_value(), "{}: token '{}' is not in the vocabulary", where, it->get<std::string>());
  return *id;
}

std::unique_ptr<PostProcessor> parse_template(const json& j, const std::string& where) {
  std::map<std::string, std::vector<int32_t>> specials;
  if (j.contains("special_tokens") && j["special_tokens"].is_object()) {
    for (const auto& [name, v] : j["special_tokens"].items()) {
      CYPRIS_CHECK(v.is_object() && v.contains("ids") && v["ids"].is_array(),
                   "{}: special_tokens '{}' needs an 'ids' array", where, name);
      std::vector<int32_t> ids;
      for (const auto& x : v["ids"]) {
        CYPRIS_CHECK(x.is_number_integer(), "{}: special_tokens '{}' ids must be integers", where, name);
        ids.push_back(x.get<int32_t>());
      }
      specials[name] = std::move(ids);
    }
  }
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const auto& item : get_array(j, "single", where)) {
    if (item.contains("Sequence")) {
      CYPRIS_CHECK(!seen_sequence, "{}: 'single' has more than one Sequence", where);
      seen_sequence = true;
      continue;
    }
    CYPRIS_CHECK(item.contains("SpecialToken") && item["SpecialToken"].is_object(),
                 "{}: 'single' items must be SpecialToken or Sequence", where);
    std::string id = get_string(item["SpecialToken"], "id", where);
    auto it = specials.find(id);
    CYPRIS_CHECK(it != specials.end(), "{}: special token '{}' is missing from special_tokens", where, id);
    auto& dst = seen_sequence ? suffix : prefix;
    dst.insert(dst.end(), it->second.begin(), it->second.end());
  }
  CYPRIS_CHECK(seen_sequence, "{}: 'single' has no Sequence item", where);
  return std::make_unique<AffixProcessor>(std::move(prefix), std::move(suffix));
}

}  // namespace

std::unique_ptr<PostProcessor> make_affix_post_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  return std::make_unique<AffixProcessor>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> parse_post_processor(const json& j, const std::string& where,
                                                    const TokenLookup& lookup) {
  if (j.is_null()) return nullptr;
  std::string type = get_type(j, where);
  std::string w = where + " " + type;
  if (type == "ByteLevel") return std::make_unique<NoopProcessor>();
  if (type == "TemplateProcessing") return parse_template(j, w);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    int32_t cls = lookup_token(j, "cls", w, lookup), sep = lookup_token(j, "sep", w, lookup);
    return std::make_unique<AffixProcessor>(std::vector<int32_t>{cls}, std::vector<int32_t>{sep});
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const auto& item : get_array(j, "processors", w))
      if (auto p = parse_post_processor(item, where, lookup)) parts.push_back(std::move(p));
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  CYPRIS_FAIL(
      "{} type '{}' is not supported; supported: TemplateProcessing, ByteLevel, RobertaProcessing, "
      "BertProcessing, Sequence",
      where, type);
}

std::unique_ptr<Decoder> make_byte_level_decoder() {
  return stage_decoder<ByteLevelStage>();
}

std::unique_ptr<Decoder> make_sentencepiece_decoder() {
  std::vector<std::unique_ptr<Decoder>> parts;
  parts.push_back(stage_decoder<ReplaceStage>(std::string("\xE2\x96\x81"), std::string(" ")));
  parts.push_back(stage_decoder<ByteFallbackStage>());
  parts.push_back(stage_decoder<FuseStage>());
  parts.push_back(stage_decoder<StripStage>(std::string(" "), size_t(1), size_t(0)));
  return std::make_unique<SequenceDecoder>(std::move(parts));
}

std::unique_ptr<Decoder> parse_decoder(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = get_type(j, where);
  std::string w = where + " " + type;
  if (type == "ByteLevel") return stage_decoder<ByteLevelStage>();
  if (type == "ByteFallback") return stage_decoder<ByteFallbackStage>();
  if (type == "Fuse") return stage_decoder<FuseStage>();
  if (type == "Replace") {
    CYPRIS_CHECK(j.contains("pattern") && j["pattern"].is_object() && j["pattern"].contains("String"),
                 "{}: only String patterns are supported (a Regex pattern is not)", w);
    std::string pattern = get_string(j["pattern"], "String", w);
    CYPRIS_CHECK(!pattern.empty(), "{}: the pattern must not be empty", w);
    return stage_decoder<ReplaceStage>(pattern, get_string(j, "content", w));
  }
  if (type == "Strip") {
    std::string content = get_string(j, "content", w, " ");
    CYPRIS_CHECK(!content.empty(), "{}: 'content' must not be empty", w);
    auto num = [&](const char* key) {
      CYPRIS_CHECK(j.contains(key) && j[key].is_number_unsigned(), "{}: '{}' must be a non-negative integer", w, key);
      return j[key].get<size_t>();
    };
    return stage_decoder<StripStage>(content, num("start"), num("stop"));
  }
  if (type == "Metaspace") {
    std::string rep = j.contains("replacement") ? get_string(j, "replacement", w) : "\xE2\x96\x81";
    CYPRIS_CHECK(!rep.empty(), "{}: 'replacement' must not be empty", w);
    bool drop = true;
    if (j.contains("prepend_scheme")) {
      drop = get_string(j, "prepend_scheme", w) != "never";
    } else if (j.contains("add_prefix_space")) {
      drop = get_bool(j, "add_prefix_space", w, true);
    }
    return stage_decoder<MetaspaceStage>(rep, drop);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& item : get_array(j, "decoders", w))
      if (auto d = parse_decoder(item, where)) parts.push_back(std::move(d));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  CYPRIS_FAIL(
      "{} type '{}' is not supported; supported: ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, "
      "Sequence",
      where, type);
}

// ---- DecodeChain ----

DecodeChain::DecodeChain(const Decoder* decoder) : has_decoder_(decoder != nullptr) {
  if (decoder) decoder->make_stages(stages_);
}

void DecodeChain::run_from(size_t stage, std::vector<DecodePiece>& pieces, std::string& out) {
  for (size_t s = stage; s < stages_.size() && !pieces.empty(); ++s) {
    std::vector<DecodePiece> next;
    for (auto& p : pieces) stages_[s]->push(std::move(p), next);
    pieces = std::move(next);
  }
  for (const auto& p : pieces) {
    out += p.text;
    if (!p.text.empty()) emitted_any_ = true;
  }
}

void DecodeChain::push(std::string_view token, std::string& out) {
  if (!has_decoder_) {
    if (joined_any_) out += ' ';
    joined_any_ = true;
    out += token;
    emitted_any_ = emitted_any_ || !token.empty();
    return;
  }
  std::vector<DecodePiece> pieces{{std::string(token), true}};
  run_from(0, pieces, out);
}

void DecodeChain::release_complete(std::string& out) {
  if (!has_decoder_) return;
  for (size_t s = 0; s < stages_.size(); ++s) {
    std::vector<DecodePiece> pieces;
    stages_[s]->release_complete(pieces);
    run_from(s + 1, pieces, out);
  }
}

void DecodeChain::finish(std::string& out) {
  for (size_t s = 0; s < stages_.size(); ++s) {
    std::vector<DecodePiece> pieces;
    stages_[s]->finish(pieces);
    run_from(s + 1, pieces, out);
  }
}

}  // namespace cypris::hf
