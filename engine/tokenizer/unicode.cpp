// UTF-8 helpers, NFC/NFD and the GPT-2 byte map. See unicode.h.
#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace cypris::unicode {
namespace {

struct CccEntry {
  uint32_t cp;
  uint8_t ccc;
};
struct DecompEntry {
  uint32_t cp, first, second;  // second == 0: a singleton decomposition
};
struct CompEntry {
  uint32_t first, second, composite;
};
struct RangeEntry {
  uint32_t lo, hi;
};
#include "engine/tokenizer/unicode_nfc_data.inc"

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t ccc_of(uint32_t cp) {
  if (cp < 0x300) return 0;
  auto it =
      std::lower_bound(std::begin(kCcc), std::end(kCcc), cp, [](const CccEntry& e, uint32_t v) { return e.cp < v; });
  return (it != std::end(kCcc) && it->cp == cp) ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    auto it = std::lower_bound(std::begin(kDecomp), std::end(kDecomp), cp,
                               [](const DecompEntry& e, uint32_t v) { return e.cp < v; });
    if (it != std::end(kDecomp) && it->cp == cp) {
      decompose(it->first, out);
      if (it->second) decompose(it->second, out);
      return;
    }
  }
  out.push_back(cp);
}

uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  uint64_t key = (uint64_t(a) << 32) | b;
  auto it = std::lower_bound(std::begin(kComp), std::end(kComp), key,
                             [](const CompEntry& e, uint64_t v) { return ((uint64_t(e.first) << 32) | e.second) < v; });
  if (it != std::end(kComp) && it->first == a && it->second == b) return it->composite;
  return 0;
}

std::vector<uint32_t> decompose_all(std::string_view s) {
  std::vector<uint32_t> d;
  d.reserve(s.size());
  for (size_t i = 0; i < s.size();) decompose(next_cp(s, i), d);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (ccc_of(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc_of(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j, [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  return d;
}

std::array<std::string, 256> make_byte_chars() {
  std::array<std::string, 256> out;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
    append_utf8(out[b], cp);
  }
  return out;
}

const std::array<std::string, 256>& byte_chars() {
  static const std::array<std::string, 256> chars = make_byte_chars();
  return chars;
}

std::array<int16_t, 512> make_char_bytes() {
  std::array<int16_t, 512> out;
  out.fill(-1);
  const auto& chars = byte_chars();
  for (int b = 0; b < 256; ++b) {
    size_t i = 0;
    out[next_cp(chars[b], i)] = int16_t(b);
  }
  return out;
}

}  // namespace

size_t utf8_len_of_lead(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

uint32_t next_cp(std::string_view s, size_t& i) {
  unsigned char c = s[i];
  size_t n = utf8_len_of_lead(c);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return c;
  }
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

// Returns the valid range of the byte at position pos (1-based after the lead) for a lead byte.
static bool continuation_ok(uint8_t lead, int pos, uint8_t b) {
  if (pos == 1) {
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  }
  return b >= 0x80 && b <= 0xBF;
}

static int lead_need(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int need = lead_need(c);
    if (need == 0 || i + need > n) return false;
    for (int k = 1; k < need; ++k)
      if (!continuation_ok(c, k, uint8_t(s[i + k]))) return false;
    i += need;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  Utf8StreamDecoder dec;
  dec.push(s, out);
  dec.finish(out);
  return out;
}

void Utf8StreamDecoder::push_byte(uint8_t b, std::string& out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  if (held_len_ == 0) {
    int need = lead_need(b);
    if (need == 1) {
      out.push_back(char(b));
    } else if (need == 0) {
      out.append(kReplacement);
    } else {
      held_[0] = b;
      held_len_ = 1;
      need_ = need;
    }
    return;
  }
  if (continuation_ok(held_[0], held_len_, b)) {
    held_[held_len_++] = b;
    if (held_len_ == need_) {
      out.append(reinterpret_cast<const char*>(held_), size_t(held_len_));
      held_len_ = 0;
    }
    return;
  }
  out.append(kReplacement);
  held_len_ = 0;
  push_byte(b, out);
}

void Utf8StreamDecoder::push(std::string_view bytes, std::string& out) {
  for (char c : bytes) {
    if (held_len_ == 0 && uint8_t(c) < 0x80) {
      out.push_back(c);
    } else {
      push_byte(uint8_t(c), out);
    }
  }
}

void Utf8StreamDecoder::finish(std::string& out) {
  if (held_len_ > 0) out.append("\xEF\xBF\xBD");
  held_len_ = 0;
}

bool is_nfc_quick(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (uint8_t(s[i]) < 0xCC) {  // every code point below U+0300 is NFC_QC=Yes
      i += utf8_len_of_lead(uint8_t(s[i]));
      continue;
    }
    uint32_t cp = next_cp(s, i);
    if (cp < 0x300) continue;
    auto it = std::upper_bound(std::begin(kNotNfcQcYes), std::end(kNotNfcQcYes), cp,
                               [](uint32_t v, const RangeEntry& e) { return v < e.lo; });
    if (it != std::begin(kNotNfcQcYes) && cp <= std::prev(it)->hi) return false;
  }
  return true;
}

std::string nfc(std::string_view s) {
  if (is_nfc_quick(s)) return std::string(s);
  std::vector<uint32_t> d = decompose_all(s);
  std::vector<uint32_t> out;
  out.reserve(d.size());
  long starter = -1;
  uint8_t last_ccc = 0;
  for (uint32_t cp : d) {
    uint8_t cc = ccc_of(cp);
    if (starter >= 0) {
      bool adjacent = size_t(starter) + 1 == out.size();
      bool blocked = !adjacent && (last_ccc == 0 || last_ccc >= cc);
      if (!blocked) {
        if (uint32_t c = compose_pair(out[starter], cp)) {
          out[starter] = c;
          continue;
        }
      }
    }
    if (cc == 0) starter = long(out.size());
    last_ccc = cc;
    out.push_back(cp);
  }
  std::string r;
  r.reserve(s.size());
  for (uint32_t cp : out) append_utf8(r, cp);
  return r;
}

std::string nfd(std::string_view s) {
  std::string r;
  r.reserve(s.size());
  for (uint32_t cp : decompose_all(s)) append_utf8(r, cp);
  return r;
}

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  // Approximation of Unicode Alphabetic|Numeric without tables: everything outside whitespace, the
  // Latin-1 symbols and the general/CJK punctuation blocks.
  if (is_whitespace(cp)) return false;
  if (cp < 0xC0)
    return cp == 0xAA || cp == 0xB5 || cp == 0xBA || (cp >= 0xB2 && cp <= 0xB3) || cp == 0xB9 ||
           (cp >= 0xBC && cp <= 0xBE);
  if (cp == 0xD7 || cp == 0xF7) return false;
  if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFF00 && cp <= 0xFF0F) ||
      (cp >= 0x1F000 && cp <= 0x1FAFF))
    return false;
  return true;
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_cp(s, i);
    if ((cp >= 'A' && cp <= 'Z') || (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) {
      cp += 32;
    } else if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
      // Latin Extended-A alternates upper/lower, with the parity flipped in 0x139..0x148 and 0x179..0x17E.
      bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
      if ((cp % 2 == 1) == odd_upper) cp += 1;
    } else if (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2) {
      cp += 32;
    } else if (cp >= 0x410 && cp <= 0x42F) {
      cp += 32;
    } else if (cp >= 0x400 && cp <= 0x40F) {
      cp += 80;
    }
    append_utf8(out, cp);
  }
  return out;
}

const std::string& byte_to_char(uint8_t b) {
  return byte_chars()[b];
}

int char_to_byte(uint32_t cp) {
  static const std::array<int16_t, 512> table = make_char_bytes();
  return cp < 512 ? table[cp] : -1;
}

}  // namespace cypris::unicode
