// Added tokens, post-processing, special-token ids and chain decoding shared by the built-in
// tokenizers. See tokenizer_base.h.
#include "engine/tokenizer/tokenizer_base.h"

#include <algorithm>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/tokenizer/unicode.h"

namespace cypris {

// Added tokens grouped by first byte, longest first: the first hit at the leftmost position is the
// leftmost-longest match Hugging Face's Aho-Corasick search finds.
struct TokenizerBase::Matcher {
  std::vector<size_t> by_first[256];
  std::vector<std::string> text;  // per added token: the string matched (normalized tokens: normalized content)
  bool empty = true;
};

TokenizerBase::TokenizerBase() = default;
TokenizerBase::~TokenizerBase() = default;

void TokenizerBase::init_vocab(std::vector<std::string> model_pieces, int32_t model_size) {
  pieces_ = std::move(model_pieces);
  model_size_ = model_size;
  if (int32_t(pieces_.size()) < model_size) pieces_.resize(size_t(model_size));
  special_.assign(pieces_.size(), 0);
}

void TokenizerBase::add_token(const AddedToken& t) {
  CYPRIS_CHECK(t.id >= 0 && t.id < (1 << 28), "added token '{}' has an invalid id {}", t.content, t.id);
  CYPRIS_CHECK(!t.content.empty(), "added token {} has empty content", t.id);
  if (size_t(t.id) >= pieces_.size()) {
    pieces_.resize(size_t(t.id) + 1);
    special_.resize(size_t(t.id) + 1, 0);
  }
  pieces_[t.id] = t.content;
  special_[t.id] = t.special ? 1 : 0;
  auto it = added_by_id_.find(t.id);
  if (it != added_by_id_.end()) {
    added_[it->second] = t;
  } else {
    added_by_id_[t.id] = added_.size();
    added_.push_back(t);
  }
}

void TokenizerBase::apply_config(const TokenizerConfig& cfg) {
  for (const auto& t : cfg.added_tokens)
    if (!added_by_id_.count(t.id)) add_token(t);
  // Named special tokens are special added tokens in Transformers, in the text and when skipping.
  auto resolve = [&](const std::optional<std::string>& name, const char* field) -> std::optional<int32_t> {
    if (!name || name->empty()) return std::nullopt;
    auto id = piece_to_id(*name);
    if (!id) {
      LOG_WARN("tokenizer_config.json: {} '{}' is not in the vocabulary; ignored", field, *name);
      return std::nullopt;
    }
    if (!added_by_id_.count(*id)) add_token({*id, *name, true, false, false, false, false});
    special_[*id] = 1;
    return id;
  };
  bos_id_ = resolve(cfg.bos_token, "bos_token");
  eos_id_ = resolve(cfg.eos_token, "eos_token");
  pad_id_ = resolve(cfg.pad_token, "pad_token");
  unk_id_ = resolve(cfg.unk_token, "unk_token");
  bos_token_ = bos_id_ ? *cfg.bos_token : "";
  eos_token_ = eos_id_ ? *cfg.eos_token : "";
  chat_templates_ = cfg.chat_templates;
  model_max_length_ = cfg.model_max_length;
}

void TokenizerBase::finalize() {
  raw_matcher_ = std::make_unique<Matcher>();
  normalized_matcher_ = std::make_unique<Matcher>();
  raw_matcher_->text.resize(added_.size());
  normalized_matcher_->text.resize(added_.size());
  for (size_t i = 0; i < added_.size(); ++i) {
    Matcher& m = added_[i].normalized ? *normalized_matcher_ : *raw_matcher_;
    // Like Hugging Face, a normalized token is looked for in normalized text in its normalized form
    // (Llama 2's "<s>" becomes "▁<s>" under its Prepend normalizer).
    m.text[i] = added_[i].normalized ? normalize(added_[i].content) : added_[i].content;
    if (m.text[i].empty()) continue;
    m.by_first[uint8_t(m.text[i][0])].push_back(i);
    m.empty = false;
  }
  for (Matcher* m : {raw_matcher_.get(), normalized_matcher_.get()})
    for (auto& v : m->by_first)
      std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) { return m->text[a].size() > m->text[b].size(); });
}

static uint32_t cp_before(std::string_view s, size_t pos, size_t* start) {
  size_t b = pos - 1;
  while (b > 0 && (uint8_t(s[b]) & 0xC0) == 0x80) --b;
  if (start) *start = b;
  size_t i = b;
  return unicode::next_cp(s, i);
}

void TokenizerBase::split_added(std::string_view text, const Matcher& m, std::vector<Segment>& out) const {
  size_t start_offset = 0, pos = 0, n = text.size();
  while (pos < n) {
    const auto& cands = m.by_first[uint8_t(text[pos])];
    const AddedToken* hit = nullptr;
    size_t hit_len = 0;
    for (size_t idx : cands) {
      const auto& c = m.text[idx];
      if (text.compare(pos, c.size(), c) == 0) {
        hit = &added_[idx];
        hit_len = c.size();
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit_len;
    if (hit->single_word) {
      bool word_before = start > 0 && unicode::is_word_char(cp_before(text, start, nullptr));
      size_t i = stop;
      bool word_after = stop < n && unicode::is_word_char(unicode::next_cp(text, i));
      if (word_before || word_after) {
        pos = stop;
        continue;
      }
    }
    if (hit->lstrip) {
      while (start > start_offset) {
        size_t b = 0;
        if (!unicode::is_whitespace(cp_before(text, start, &b))) break;
        start = b;
      }
    }
    if (hit->rstrip) {
      while (stop < n) {
        size_t i = stop;
        if (!unicode::is_whitespace(unicode::next_cp(text, i))) break;
        stop = i;
      }
    }
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), -1, start_offset});
    out.push_back({text.substr(start, stop - start), hit->id, start});
    start_offset = pos = stop;
  }
  if (start_offset < n) out.push_back({text.substr(start_offset), -1, start_offset});
}

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::to_valid_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segs;
  split_added(text, *raw_matcher_, segs);
  std::vector<Segment> sub;
  for (const auto& seg : segs) {
    if (seg.added_id >= 0) {
      ids.push_back(seg.added_id);
      continue;
    }
    std::string norm = normalize(std::string(seg.text));
    if (normalized_matcher_->empty) {
      encode_model(norm, seg.offset == 0, ids);
      continue;
    }
    sub.clear();
    split_added(norm, *normalized_matcher_, sub);
    for (const auto& s : sub) {
      if (s.added_id >= 0) {
        ids.push_back(s.added_id);
      } else {
        encode_model(s.text, seg.offset == 0 && s.offset == 0, ids);
      }
    }
  }
  if (add_special_tokens && post_processor_) post_processor_->process(ids);
  return ids;
}

std::string TokenizerBase::id_to_piece(int32_t id) const {
  if (id < 0 || size_t(id) >= pieces_.size()) return "";
  return pieces_[id];
}

std::optional<int32_t> TokenizerBase::piece_to_id(std::string_view piece) const {
  for (const auto& t : added_)
    if (t.content == piece) return t.id;
  return model_token_to_id(piece);
}

bool TokenizerBase::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < special_.size() && special_[id];
}

bool TokenizerBase::is_legacy_added(int32_t id) const {
  auto it = added_by_id_.find(id);
  if (it == added_by_id_.end()) return false;
  return !added_[it->second].special || id >= model_size_;
}

// Streams ids through the decoder chain; in slow mode legacy added tokens cut the text into parts
// joined with spaces (see TokenizerBase::slow_decode_).
class BaseDecodeStream : public DecodeStream {
 public:
  BaseDecodeStream(const TokenizerBase& tok, bool skip, bool spaces)
      : tok_(tok), skip_(skip), spaces_(spaces && tok.slow_decode_) {
    chain_ = std::make_unique<hf::DecodeChain>(tok_.decoder_.get());
  }

  std::string push(int32_t id) override {
    if (id < 0 || size_t(id) >= tok_.pieces_.size()) return "";
    if (skip_ && tok_.is_special(id)) return "";
    const std::string& piece = tok_.pieces_[id];
    if (tok_.slow_decode_ && tok_.is_legacy_added(id)) {
      std::string out = end_segment();
      if (have_prev_ && spaces_) out += ' ';
      out += piece;
      have_prev_ = true;
      return out;
    }
    seg_has_tokens_ = true;
    std::string t;
    chain_->push(piece, t);
    return emit(std::move(t));
  }

  std::string release_complete() override {
    std::string t;
    chain_->release_complete(t);
    return emit(std::move(t));
  }

  std::string finish() override {
    bool had_tokens = seg_has_tokens_;
    bool prev = have_prev_;
    std::string out = end_segment();
    // Transformers keeps a trailing part even when it decodes to nothing, so " ".join adds a space.
    if (had_tokens && out.empty() && prev && spaces_ && !last_seg_emitted_) out += ' ';
    return out;
  }

 private:
  std::string emit(std::string t) {
    if (t.empty()) return t;
    if (!seg_emitted_ && have_prev_ && spaces_) t.insert(0, 1, ' ');
    seg_emitted_ = true;
    return t;
  }
  std::string end_segment() {
    std::string t;
    chain_->finish(t);
    std::string out = emit(std::move(t));
    last_seg_emitted_ = seg_emitted_;
    if (seg_emitted_) have_prev_ = true;
    chain_ = std::make_unique<hf::DecodeChain>(tok_.decoder_.get());
    seg_has_tokens_ = seg_emitted_ = false;
    return out;
  }

  const TokenizerBase& tok_;
  bool skip_, spaces_;
  std::unique_ptr<hf::DecodeChain> chain_;
  bool seg_has_tokens_ = false, seg_emitted_ = false, have_prev_ = false, last_seg_emitted_ = false;
};

std::unique_ptr<DecodeStream> TokenizerBase::decode_stream(bool skip_special_tokens,
                                                           bool spaces_between_special_tokens) const {
  return std::make_unique<BaseDecodeStream>(*this, skip_special_tokens, spaces_between_special_tokens);
}

std::string TokenizerBase::decode(std::span<const int32_t> ids, bool skip_special_tokens,
                                  bool spaces_between_special_tokens) const {
  BaseDecodeStream stream(*this, skip_special_tokens, spaces_between_special_tokens);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  out += stream.finish();
  return out;
}

}  // namespace cypris
