// UTF-8 repair and NFC against hand-worked examples from the Unicode standard.
#include "engine/tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace cypris {
namespace {

TEST(Unicode, NfcComposesAndReorders) {
  EXPECT_EQ(unicode::nfc("e\xCC\x81"), "\xC3\xA9");                     // e + U+0301 -> é
  EXPECT_EQ(unicode::nfc("A\xCC\x8A"), "\xC3\x85");                     // A + ring -> Å
  EXPECT_EQ(unicode::nfc("\xE2\x84\xAB"), "\xC3\x85");                  // U+212B ANGSTROM SIGN -> Å
  EXPECT_EQ(unicode::nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // jamo ᄀ + ᅡ -> 가
  // q + dot above (230) + dot below (220): canonical ordering puts the dot below first.
  EXPECT_EQ(unicode::nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");
  // ṩ: s + dot above + dot below -> U+1E69 (reordering first lets dot below compose)
  EXPECT_EQ(unicode::nfc("s\xCC\x87\xCC\xA3"), "\xE1\xB9\xA9");
  EXPECT_EQ(unicode::nfc("Vi\xE1\xBB\x87t"), "Vi\xE1\xBB\x87t");  // already NFC
  EXPECT_EQ(unicode::nfd("\xC3\xA9"), "e\xCC\x81");
}

TEST(Unicode, RepairsInvalidUtf8LikeRust) {
  EXPECT_EQ(unicode::to_valid_utf8("a\xFF"
                                   "b"),
            "a\xEF\xBF\xBD"
            "b");
  // A truncated 3-byte sequence is one maximal subpart: one replacement character.
  EXPECT_EQ(unicode::to_valid_utf8("\xE2\x82"
                                   "x"),
            "\xEF\xBF\xBD"
            "x");
  // A surrogate encoding is invalid at its second byte: each byte is replaced.
  EXPECT_EQ(unicode::to_valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(unicode::to_valid_utf8("\xF0\x9F\xA6"), "\xEF\xBF\xBD");
}

TEST(Unicode, StreamDecoderMatchesWholeDecoding) {
  std::string bytes =
      "a\xF0\x9F\xA6\x99\xE2\x82"
      "b\xC3\xA9\xFF\xF0\x9F";
  std::string expected = unicode::to_valid_utf8(bytes);
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    unicode::Utf8StreamDecoder d;
    std::string out;
    d.push(std::string_view(bytes).substr(0, cut), out);
    EXPECT_TRUE(unicode::is_valid_utf8(out));
    d.push(std::string_view(bytes).substr(cut), out);
    d.finish(out);
    EXPECT_EQ(out, expected) << cut;
  }
}

}  // namespace
}  // namespace cypris
