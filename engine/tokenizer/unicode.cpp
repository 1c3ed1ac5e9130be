// UTF-8 helpers, the Unicode properties and normalisation forms (from utf8proc) and the GPT-2 byte
// map. See unicode.h.
#include "engine/tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>

#include "engine/common/error.h"
#include "engine/tokenizer/regex.h"

namespace cypris::unicode {
namespace {

// utf8proc_map over s with `options`; the result is malloc'ed by utf8proc. Text that is not valid
// UTF-8 is repaired first (as everywhere in the tokenizers: maximal invalid subparts -> U+FFFD).
std::string utf8proc_apply(std::string_view s, int options) {
  std::string repaired;
  if (!is_valid_utf8(s)) {
    repaired = to_valid_utf8(s);
    s = repaired;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  CYPRIS_CHECK(n >= 0, "Unicode normalisation of a {}-byte text failed: {}", s.size(), utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
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
    // Not certainly NFC: a code point with a canonical decomposition, a mark (every NFC_QC=Maybe
    // code point is a mark or a Hangul vowel or trailing jamo, and every non-zero combining class
    // is a mark), or one of those jamo.
    if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return false;
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    if (p->combining_class != 0) return false;
    if (p->category == UTF8PROC_CATEGORY_MN || p->category == UTF8PROC_CATEGORY_MC ||
        p->category == UTF8PROC_CATEGORY_ME)
      return false;
    if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return false;  // canonical decomposition
  }
  return true;
}

std::string nfc(std::string_view s) {
  if (is_valid_utf8(s) && is_nfc_quick(s)) return std::string(s);
  return utf8proc_apply(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
}

std::string nfd(std::string_view s) {
  return utf8proc_apply(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
}

std::string nfkc(std::string_view s) {
  return utf8proc_apply(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
}

std::string nfkd(std::string_view s) {
  return utf8proc_apply(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
}

std::string case_fold(std::string_view s) {
  return utf8proc_apply(s, UTF8PROC_CASEFOLD);
}

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  if (cp > 0x10FFFF) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_SO: {
      // Alphabetic also holds Other_Alphabetic, which are marks (vowel signs) and symbols (circled
      // letters); utf8proc has no such property, PCRE2 has it from its Unicode tables.
      static const Regex alphabetic("\\p{Alphabetic}", false, "the Unicode Alphabetic property");
      std::string c;
      append_utf8(c, cp);
      return alphabetic.matches_at(c, 0);
    }
    default:
      return false;
  }
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_cp(s, i);
    if (cp < 0x80) {
      out.push_back(cp >= 'A' && cp <= 'Z' ? char(cp + 32) : char(cp));
    } else if (cp == 0x130) {
      out += "i\xCC\x87";  // the one unconditional multi-character lower-case mapping (SpecialCasing.txt)
    } else {
      append_utf8(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
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
