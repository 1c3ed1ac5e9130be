// Token bytes and the sorted token list (see token_vocab.h).
#include "engine/guided/token_vocab.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "engine/common/error.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris::guided {

uint32_t byte_level_char(uint8_t b) {
  // Printable bytes stand for themselves; the rest take code points 256, 257, ... in byte order.
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (int c = 0; c < 256; ++c) {
      bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
      t[c] = printable ? static_cast<uint32_t>(c) : next++;
    }
    return t;
  }();
  return table[b];
}

namespace {

// Decodes one UTF-8 code point at s[i]; returns false on malformed input.
bool next_cp(const std::string& s, size_t& i, uint32_t& cp) {
  unsigned char c = s[i];
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return false;
  cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return true;
}

std::string byte_level_decode(const std::string& piece,
                              const std::unordered_map<uint32_t, uint8_t>& inverse) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    uint32_t cp;
    if (!next_cp(piece, i, cp)) return piece;
    auto it = inverse.find(cp);
    if (it == inverse.end()) return piece;  // an added token stored as plain text
    out += static_cast<char>(it->second);
  }
  return out;
}

std::string sentencepiece_decode(const std::string& piece) {
  if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>') {
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    int hi = hex(piece[3]), lo = hex(piece[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  std::string out;
  static const std::string kSpace = "\xE2\x96\x81";  // ▁
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, 3, kSpace) == 0) {
      out += ' ';
      i += 3;
    } else {
      out += piece[i++];
    }
  }
  return out;
}

}  // namespace

void TokenVocab::finalize() {
  sorted.clear();
  for (int32_t id = 0; id < size; ++id)
    if (!bytes[id].empty()) sorted.push_back(id);
  std::sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) {
    return bytes[a] != bytes[b] ? bytes[a] < bytes[b] : a < b;
  });
  lcp.assign(sorted.size(), 0);
  for (size_t i = 1; i < sorted.size(); ++i) {
    const std::string &a = bytes[sorted[i - 1]], &b = bytes[sorted[i]];
    size_t n = 0, m = std::min<size_t>({a.size(), b.size(), 65535});
    while (n < m && a[n] == b[n]) ++n;
    lcp[i] = static_cast<uint16_t>(n);
  }
  std::sort(end_ids.begin(), end_ids.end());
  end_ids.erase(std::unique(end_ids.begin(), end_ids.end()), end_ids.end());
  end_ids.erase(std::remove_if(end_ids.begin(), end_ids.end(), [&](int32_t id) { return id < 0 || id >= size; }),
                end_ids.end());
}

std::shared_ptr<const TokenVocab> vocab_from_tokenizer(const Tokenizer& tok, int32_t model_vocab_size,
                                                       std::vector<int32_t> end_ids) {
  auto v = std::make_shared<TokenVocab>();
  int32_t n = tok.vocab_size();
  v->size = std::max(n, model_vocab_size);
  v->bytes.assign(v->size, std::string());
  // Byte-level BPE vocabularies spell the space byte as "Ġ" (U+0120); SentencePiece ones as "▁".
  bool byte_level = tok.piece_to_id("\xC4\xA0").has_value() || tok.piece_to_id("\xC4\x8A").has_value();
  std::unordered_map<uint32_t, uint8_t> inverse;
  for (int b = 0; b < 256; ++b) inverse[byte_level_char(static_cast<uint8_t>(b))] = static_cast<uint8_t>(b);
  for (int32_t id = 0; id < n; ++id) {
    if (tok.is_special(id)) continue;
    std::string piece = tok.id_to_piece(id);
    v->bytes[id] = byte_level ? byte_level_decode(piece, inverse) : sentencepiece_decode(piece);
  }
  // BOS/UNK/PAD are control tokens even where the vocabulary does not mark them special.
  for (auto id : {tok.bos_id(), tok.unk_id(), tok.pad_id()})
    if (id && *id >= 0 && *id < v->size) v->bytes[*id].clear();
  if (auto eos = tok.eos_id()) end_ids.push_back(*eos);
  for (int32_t id : end_ids)
    if (id >= 0 && id < v->size) v->bytes[id].clear();
  v->end_ids = std::move(end_ids);
  v->finalize();
  return v;
}

}  // namespace cypris::guided
