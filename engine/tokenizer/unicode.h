// UTF-8 and Unicode helpers the tokenizers (and guided decoding) need: decoding/encoding code points,
// repairing invalid UTF-8, the normalisation forms, case folding and lower-casing and the character
// classes (Unicode data from utf8proc), the GPT-2 byte<->char map, and a streaming lossy UTF-8
// decoder that matches Rust's String::from_utf8_lossy.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cypris::unicode {

// Decodes the code point at s[i] (valid UTF-8 assumed); advances i.
uint32_t next_cp(std::string_view s, size_t& i);
void append_utf8(std::string& out, uint32_t cp);
size_t utf8_len_of_lead(unsigned char c);  // 1..4; 1 for a stray continuation byte

// True when s is valid UTF-8.
bool is_valid_utf8(std::string_view s);
// s with every maximal invalid subsequence replaced by U+FFFD (as Rust's from_utf8_lossy does).
std::string to_valid_utf8(std::string_view s);

// The Unicode normalisation forms. Text that is not valid UTF-8 is repaired first (to_valid_utf8).
std::string nfc(std::string_view s);
std::string nfd(std::string_view s);
std::string nfkc(std::string_view s);
std::string nfkd(std::string_view s);
// True only when s is certainly in NFC (no code point that decomposes canonically, no mark, no
// Hangul vowel or trailing jamo); false does not mean it is not.
bool is_nfc_quick(std::string_view s);
// Full case folding (CaseFolding.txt, statuses C and F: "ß" -> "ss"), as Python's str.casefold;
// for caseless matching.
std::string case_fold(std::string_view s);

// Unicode White_Space property (Rust char::is_whitespace).
bool is_whitespace(uint32_t cp);
// Rust's char::is_alphanumeric (Alphabetic or Numeric) or '_', used for added tokens' single_word.
bool is_word_char(uint32_t cp);

// Each code point's full lower-case mapping, context-free (Rust's char::to_lowercase, which the
// Hugging Face Lowercase normalizer applies: "İ" -> "i̇", no final-sigma rule).
std::string to_lower(std::string_view s);

// GPT-2 bytes_to_unicode: each byte's printable stand-in character, UTF-8 encoded.
const std::string& byte_to_char(uint8_t b);
// Reverse of byte_to_char for one code point; -1 when cp is not a stand-in.
int char_to_byte(uint32_t cp);

// Streaming UTF-8 decoder with U+FFFD replacement of maximal invalid subparts. Feeding bytes in any
// chunking and then finish() gives exactly to_valid_utf8() of the concatenation.
class Utf8StreamDecoder {
 public:
  // Appends the text that is now certain to out.
  void push(std::string_view bytes, std::string& out);
  // Appends U+FFFD for an incomplete trailing sequence, and resets.
  void finish(std::string& out);
  bool pending() const { return held_len_ > 0; }

 private:
  void push_byte(uint8_t b, std::string& out);
  uint8_t held_[4] = {};
  int held_len_ = 0;
  int need_ = 0;
};

}  // namespace cypris::unicode
