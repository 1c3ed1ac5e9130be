// Normalizers and pre-tokenizers of tokenizer.json. See hf_components.h.
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/tokenizer/hf_components.h"
#include "engine/tokenizer/hf_json_util.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/unicode.h"

namespace cypris::hf {

using json = nlohmann::json;

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// ---- normalizers ----

class NfcNormalizer : public Normalizer {
 public:
  std::string normalize(std::string s) const override { return unicode::is_nfc_quick(s) ? s : unicode::nfc(s); }
};
class NfdNormalizer : public Normalizer {
 public:
  std::string normalize(std::string s) const override { return unicode::nfd(s); }
};
class NfkcNormalizer : public Normalizer {
 public:
  std::string normalize(std::string s) const override { return unicode::nfkc(s); }
};
class NfkdNormalizer : public Normalizer {
 public:
  std::string normalize(std::string s) const override { return unicode::nfkd(s); }
};
class LowercaseNormalizer : public Normalizer {
 public:
  std::string normalize(std::string s) const override { return unicode::to_lower(s); }
};
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  std::string normalize(std::string s) const override { return s.empty() ? s : prepend_ + s; }

 private:
  std::string prepend_;
};

// Replaces every match of a pattern (literal or regex) with content.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string pattern, bool literal, std::string content, const std::string& where)
      : regex_(pattern, literal, where), literal_(literal ? pattern : ""), content_(std::move(content)) {}
  std::string normalize(std::string s) const override {
    if (!literal_.empty()) {
      if (s.find(literal_) == std::string::npos) return s;
      std::string out;
      out.reserve(s.size() + s.size() / 2);
      size_t pos = 0;
      for (size_t p = s.find(literal_); p != std::string::npos; p = s.find(literal_, pos)) {
        out.append(s, pos, p - pos);
        out += content_;
        pos = p + literal_.size();
      }
      out.append(s, pos, std::string::npos);
      return out;
    }
    std::vector<std::pair<size_t, size_t>> m;
    regex_.find_all(s, m);
    if (m.empty()) return s;
    std::string out;
    size_t pos = 0;
    for (auto [a, b] : m) {
      out.append(s, pos, a - pos);
      out += content_;
      pos = b;
    }
    out.append(s, pos, std::string::npos);
    return out;
  }

 private:
  Regex regex_;
  std::string literal_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string s) const override {
    size_t a = 0, b = s.size();
    if (left_) {
      while (a < b) {
        size_t i = a;
        if (!unicode::is_whitespace(unicode::next_cp(s, i))) break;
        a = i;
      }
    }
    if (right_) {
      while (b > a) {
        size_t start = b - 1;
        while (start > a && (uint8_t(s[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!unicode::is_whitespace(unicode::next_cp(s, i))) break;
        b = start;
      }
    }
    return s.substr(a, b - a);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string s) const override {
    for (const auto& p : parts_) s = p->normalize(std::move(s));
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

// ---- pre-tokenizers ----

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const json& j, const std::string& where) {
  std::string b = get_string(j, "behavior", where, "Isolated");
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  CYPRIS_FAIL(
      "{}: split behavior '{}' is not supported; supported: Removed, Isolated, MergedWithPrevious, "
      "MergedWithNext, Contiguous",
      where, b);
}

struct Part {
  size_t start, end;
  bool is_match;
};

// Hugging Face's SplitDelimiterBehavior applied to the matches of a pattern inside one piece.
void split_piece(const PreToken& piece, const std::vector<std::pair<size_t, size_t>>& matches, Behavior behavior,
                 bool invert, PreTokens& out) {
  const std::string& s = piece.text;
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (auto [a, b] : matches) {
    if (prev != a) parts.push_back({prev, a, false});
    parts.push_back({a, b, true});
    prev = b;
  }
  if (prev != s.size()) parts.push_back({prev, s.size(), false});
  if (invert)
    for (auto& p : parts) p.is_match = !p.is_match;

  std::vector<Part> res;
  res.reserve(parts.size());
  switch (behavior) {
    case Behavior::Isolated:
      res = std::move(parts);
      break;
    case Behavior::Removed:
      for (const auto& p : parts)
        if (!p.is_match) res.push_back(p);
      break;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const auto& p : parts) {
        if (p.is_match && !prev_match && !res.empty()) {
          res.back().end = p.end;
        } else {
          res.push_back(p);
        }
        prev_match = p.is_match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !prev_match && !res.empty()) {
          res.back().start = it->start;
        } else {
          res.push_back(*it);
        }
        prev_match = it->is_match;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (const auto& p : parts) {
        if (p.is_match == prev_match && !res.empty()) {
          res.back().end = p.end;
        } else {
          res.push_back(p);
        }
        prev_match = p.is_match;
      }
      break;
    }
  }
  for (const auto& p : res) {
    if (p.end > p.start) out.push_back({s.substr(p.start, p.end - p.start), piece.at_start && p.start == 0});
  }
}

class RegexSplit : public PreTokenizer {
 public:
  RegexSplit(const std::string& pattern, bool literal, Behavior behavior, bool invert, const std::string& where)
      : regex_(pattern, literal, where), behavior_(behavior), invert_(invert) {}
  void apply(PreTokens& pieces) const override {
    PreTokens out;
    out.reserve(pieces.size() * 4);
    std::vector<std::pair<size_t, size_t>> m;
    for (const auto& p : pieces) {
      m.clear();
      regex_.find_all(p.text, m);
      split_piece(p, m, behavior_, invert_, out);
    }
    pieces = std::move(out);
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) split_ = std::make_unique<RegexSplit>(kGpt2Pattern, false, Behavior::Isolated, false, "ByteLevel");
    for (int b = 0; b < 256; ++b) {
      const std::string& c = unicode::byte_to_char(uint8_t(b));
      map_len_[b] = uint8_t(c.size());
      for (size_t i = 0; i < c.size(); ++i) map_[b][i] = c[i];
    }
  }
  void apply(PreTokens& pieces) const override {
    if (add_prefix_space_)
      for (auto& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
    if (split_) split_->apply(pieces);
    std::string mapped;
    for (auto& p : pieces) {
      mapped.resize(p.text.size() * 2);
      size_t n = 0;
      for (char c : p.text) {
        uint8_t b = uint8_t(c);
        mapped[n] = map_[b][0];
        mapped[n + 1] = map_[b][1];
        n += map_len_[b];
      }
      p.text.assign(mapped.data(), n);
    }
  }

 private:
  char map_[256][2] = {};
  uint8_t map_len_[256] = {};
  bool add_prefix_space_;
  std::unique_ptr<RegexSplit> split_;
};

enum class PrependScheme { First, Always, Never };

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(std::string replacement, PrependScheme scheme, bool split)
      : rep_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void apply(PreTokens& pieces) const override {
    PreTokens out;
    for (auto& p : pieces) {
      std::string t;
      t.reserve(p.text.size() + 8);
      for (char c : p.text) {
        if (c == ' ') {
          t += rep_;
        } else {
          t += c;
        }
      }
      bool starts = t.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && p.at_start)))
        t.insert(0, rep_);
      PreToken np{std::move(t), p.at_start};
      if (!split_) {
        if (!np.text.empty()) out.push_back(std::move(np));
        continue;
      }
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t q = np.text.find(rep_); q != std::string::npos; q = np.text.find(rep_, q + rep_.size()))
        m.emplace_back(q, q + rep_.size());
      split_piece(np, m, Behavior::MergedWithNext, false, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void apply(PreTokens& pieces) const override {
    for (const auto& p : parts_) p->apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

std::pair<std::string, bool> parse_pattern(const json& j, const std::string& where) {
  CYPRIS_CHECK(j.contains("pattern") && j["pattern"].is_object(), "{}: missing object 'pattern'", where);
  const json& p = j["pattern"];
  if (p.contains("String")) return {get_string(p, "String", where), true};
  if (p.contains("Regex")) return {get_string(p, "Regex", where), false};
  CYPRIS_FAIL("{}: 'pattern' must have 'String' or 'Regex'", where);
}

}  // namespace

std::unique_ptr<Normalizer> make_nfc_normalizer() {
  return std::make_unique<NfcNormalizer>();
}

std::unique_ptr<Normalizer> parse_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = get_type(j, where);
  std::string w = where + " " + type;
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "NFD") return std::make_unique<NfdNormalizer>();
  if (type == "NFKC") return std::make_unique<NfkcNormalizer>();
  if (type == "NFKD") return std::make_unique<NfkdNormalizer>();
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(get_string(j, "prepend", w));
  if (type == "Replace") {
    auto [pattern, literal] = parse_pattern(j, w);
    return std::make_unique<ReplaceNormalizer>(pattern, literal, get_string(j, "content", w), w);
  }
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(get_bool(j, "strip_left", w, true), get_bool(j, "strip_right", w, true));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& item : get_array(j, "normalizers", w))
      if (auto n = parse_normalizer(item, where)) parts.push_back(std::move(n));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  CYPRIS_FAIL("{} type '{}' is not supported; supported: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence", where,
              type);
}

std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(bool add_prefix_space, bool use_regex) {
  return std::make_unique<ByteLevelPre>(add_prefix_space, use_regex);
}
std::unique_ptr<PreTokenizer> make_split_pre_tokenizer(const std::string& regex, const std::string& where) {
  return std::make_unique<RegexSplit>(regex, false, Behavior::Isolated, false, where);
}
std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) {
  return std::make_unique<SequencePre>(std::move(parts));
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = get_type(j, where);
  std::string w = where + " " + type;
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPre>(get_bool(j, "add_prefix_space", w, true), get_bool(j, "use_regex", w, true));
  if (type == "Split") {
    auto [pattern, literal] = parse_pattern(j, w);
    return std::make_unique<RegexSplit>(pattern, literal, parse_behavior(j, w), get_bool(j, "invert", w, false), w);
  }
  if (type == "Metaspace") {
    std::string rep = j.contains("replacement") ? get_string(j, "replacement", w) : "\xE2\x96\x81";
    CYPRIS_CHECK(!rep.empty(), "{}: 'replacement' must not be empty", w);
    PrependScheme scheme = PrependScheme::Always;
    if (j.contains("prepend_scheme")) {
      std::string s = get_string(j, "prepend_scheme", w);
      if (s == "first") {
        scheme = PrependScheme::First;
      } else if (s == "always") {
        scheme = PrependScheme::Always;
      } else if (s == "never") {
        scheme = PrependScheme::Never;
      } else {
        CYPRIS_FAIL("{}: prepend_scheme '{}' is not supported; supported: first, always, never", w, s);
      }
    } else if (j.contains("add_prefix_space")) {
      scheme = get_bool(j, "add_prefix_space", w, true) ? PrependScheme::Always : PrependScheme::Never;
    }
    return std::make_unique<MetaspacePre>(rep, scheme, get_bool(j, "split", w, true));
  }
  if (type == "Digits") {
    bool individual = get_bool(j, "individual_digits", w, false);
    return std::make_unique<RegexSplit>(individual ? "\\p{N}" : "\\p{N}+", false, Behavior::Isolated, false, w);
  }
  if (type == "Whitespace") return std::make_unique<RegexSplit>("\\w+|[^\\w\\s]+", false, Behavior::Removed, true, w);
  if (type == "WhitespaceSplit") return std::make_unique<RegexSplit>("\\s+", false, Behavior::Removed, false, w);
  if (type == "Punctuation")
    return std::make_unique<RegexSplit>("[\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]", false,
                                        parse_behavior(j, w), false, w);
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    parts.push_back(std::make_unique<RegexSplit>("\\s+", false, Behavior::Removed, false, w));
    parts.push_back(std::make_unique<RegexSplit>("[\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]", false,
                                                 Behavior::Isolated, false, w));
    return std::make_unique<SequencePre>(std::move(parts));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& item : get_array(j, "pretokenizers", w))
      if (auto p = parse_pre_tokenizer(item, where)) parts.push_back(std::move(p));
    return std::make_unique<SequencePre>(std::move(parts));
  }
  CYPRIS_FAIL(
      "{} type '{}' is not supported; supported: ByteLevel, Split, Metaspace, Digits, Whitespace, "
      "WhitespaceSplit, Punctuation, BertPreTokenizer, Sequence",
      where, type);
}

}  // namespace cypris::hf
