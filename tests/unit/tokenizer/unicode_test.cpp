// UTF-8 repair and NFC against hand-worked examples from the Unicode standard; the normalisation
// forms, case mappings and word characters against Python's Unicode data for every assigned code
// point (tests/tools/gen_unicode_reference.py).
#include "engine/tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace cypris {
namespace {

using nlohmann::json;

const json& reference() {
  static const json ref = [] {
    std::ifstream f(std::string(CYPRIS_FIXTURES_DIR) + "/unicode/reference.json");
    EXPECT_TRUE(f) << "missing tests/fixtures/unicode/reference.json";
    return f ? json::parse(f) : json::object();
  }();
  return ref;
}

std::string utf8(uint32_t cp) {
  std::string s;
  unicode::append_utf8(s, cp);
  return s;
}

// Every assigned code point of the reference's Unicode version, in order.
std::vector<uint32_t> assigned_code_points() {
  std::vector<uint32_t> cps;
  for (const auto& r : reference().value("assigned", json::array()))
    for (uint32_t cp = r[0].get<uint32_t>(); cp <= r[1].get<uint32_t>(); ++cp) cps.push_back(cp);
  return cps;
}

// Checks fn(one code point) against the reference's list of non-identity answers, for every
// assigned code point.
void expect_single_code_points(const char* name, std::string (*fn)(std::string_view)) {
  std::map<uint32_t, std::string> expected;
  for (const auto& e : reference().value(name, json::array())) expected[e[0].get<uint32_t>()] = e[1].get<std::string>();
  ASSERT_GT(expected.size(), 1000u) << name;
  auto cps = assigned_code_points();
  ASSERT_GT(cps.size(), 100000u);
  int failures = 0;
  for (uint32_t cp : cps) {
    auto it = expected.find(cp);
    std::string want = it == expected.end() ? utf8(cp) : it->second;
    std::string got = fn(utf8(cp));
    if (got != want && ++failures <= 10) ADD_FAILURE() << name << " of U+" << std::hex << cp;
  }
  EXPECT_EQ(failures, 0) << name;
}

TEST(Unicode, NormalisationFormsOfEveryCodePointMatchPython) {
  expect_single_code_points("nfc", unicode::nfc);
  expect_single_code_points("nfd", unicode::nfd);
  expect_single_code_points("nfkc", unicode::nfkc);
  expect_single_code_points("nfkd", unicode::nfkd);
}

TEST(Unicode, CaseMappingsOfEveryCodePointMatchPython) {
  expect_single_code_points("casefold", unicode::case_fold);
  expect_single_code_points("lower", unicode::to_lower);
  EXPECT_EQ(unicode::case_fold("Stra\xC3\x9F" "e"), "strasse");  // full folding: ß -> ss
  EXPECT_EQ(unicode::to_lower("\xCE\xA3\xCE\x91\xCE\xA3"), "\xCF\x83\xCE\xB1\xCF\x83");  // ΣΑΣ -> σασ: per character
}

TEST(Unicode, NormalisationOfMarkSequencesMatchesPython) {
  const auto& strings = reference().value("strings", json::array());
  ASSERT_GT(strings.size(), 300u);
  for (const auto& c : strings) {
    const std::string s = c["s"].get<std::string>();
    SCOPED_TRACE(s);
    EXPECT_EQ(unicode::nfc(s), c["nfc"].get<std::string>());
    EXPECT_EQ(unicode::nfd(s), c["nfd"].get<std::string>());
    EXPECT_EQ(unicode::nfkc(s), c["nfkc"].get<std::string>());
    EXPECT_EQ(unicode::nfkd(s), c["nfkd"].get<std::string>());
    EXPECT_EQ(unicode::case_fold(s), c["casefold"].get<std::string>());
    if (unicode::is_nfc_quick(s)) EXPECT_EQ(unicode::nfc(s), s) << "quick check said NFC";
  }
}

TEST(Unicode, QuickNfcCheckNeverPassesTextThatNormalisationChanges) {
  int quick = 0;
  for (uint32_t cp : assigned_code_points()) {
    std::string s = "a" + utf8(cp);  // after a starter, so a mark that composes with it counts
    if (!unicode::is_nfc_quick(s)) continue;
    ++quick;
    if (unicode::nfc(s) != s) ADD_FAILURE() << "U+" << std::hex << cp;
  }
  EXPECT_GT(quick, 100000);  // and it passes most text without normalising it
}

TEST(Unicode, WordCharactersAreAlphabeticOrNumericLikeRust) {
  std::vector<bool> word(0x110000, false);
  for (const auto& r : reference().value("word", json::array()))
    for (uint32_t cp = r[0].get<uint32_t>(); cp <= r[1].get<uint32_t>(); ++cp) word[cp] = true;
  int failures = 0;
  for (uint32_t cp : assigned_code_points())
    if (unicode::is_word_char(cp) != word[cp] && ++failures <= 10) ADD_FAILURE() << "U+" << std::hex << cp;
  EXPECT_EQ(failures, 0);
  EXPECT_TRUE(unicode::is_word_char(0x0915));    // क (Lo)
  EXPECT_TRUE(unicode::is_word_char(0x093E));    // the vowel sign ा (Mc, Other_Alphabetic)
  EXPECT_FALSE(unicode::is_word_char(0x0301));   // a combining accent is not Alphabetic
  EXPECT_TRUE(unicode::is_word_char(0x24B6));    // Ⓐ (So, Other_Alphabetic)
  EXPECT_FALSE(unicode::is_word_char(0x3002));   // 。
}

TEST(Unicode, InvalidUtf8IsRepairedBeforeNormalising) {
  EXPECT_EQ(unicode::nfc("e\xCC\x81\xFF"), "\xC3\xA9\xEF\xBF\xBD");
  EXPECT_EQ(unicode::case_fold("A\xE2\x82"), "a\xEF\xBF\xBD");
}

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
