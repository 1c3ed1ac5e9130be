// The tokenizer.json components on small hand-made vocabularies, where the expected ids follow
// from the definitions: split behaviours, added-token options, subword prefixes, post-processor
// templates and decoders (whole and streamed), plus Llama 2's real vocabulary behind a Metaspace
// pre-tokenizer instead of its normalizers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/unit/tokenizer/tokenizer_test_util.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class ComponentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cypris_tok_comp_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Vocabulary: a=0 b=1 -=2 ab=3 a-=4 -b=5 <s>=6 </s>=7 --=8 1=9 2=10 12=11 " "=12 <X>=13
  static json toy() {
    json j;
    j["model"] = {{"type", "BPE"},
                  {"vocab",
                   {{"a", 0},
                    {"b", 1},
                    {"-", 2},
                    {"ab", 3},
                    {"a-", 4},
                    {"-b", 5},
                    {"<s>", 6},
                    {"</s>", 7},
                    {"--", 8},
                    {"1", 9},
                    {"2", 10},
                    {"12", 11},
                    {" ", 12}}},
                  {"merges", {"a b", "a -", "- b", "- -", "1 2"}}};
    j["added_tokens"] = json::array();
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = nullptr;
    j["post_processor"] = nullptr;
    j["decoder"] = nullptr;
    return j;
  }
  std::unique_ptr<Tokenizer> load(const json& j) {
    std::ofstream(dir_ / "tokenizer.json") << j.dump();
    return load_tokenizer(dir_);
  }
  static json split(const std::string& pattern, const std::string& behavior, bool invert = false) {
    return {{"type", "Split"}, {"pattern", {{"String", pattern}}}, {"behavior", behavior}, {"invert", invert}};
  }
  fs::path dir_;
};

using Ids = std::vector<int32_t>;

TEST_F(ComponentsTest, UnicodeNormalizers) {
  json j = toy();
  // Fullwidth "ａｂ" and the circled digits "①②" are compatibility characters: NFKC and NFKD make
  // them "ab" and "12" (NFC leaves them alone).
  const std::string text = "\xEF\xBD\x81\xEF\xBD\x82\xE2\x91\xA0\xE2\x91\xA1";
  for (const char* type : {"NFKC", "NFKD"}) {
    j["normalizer"] = {{"type", type}};
    EXPECT_EQ(load(j)->encode(text, false), (Ids{3, 11})) << type;
  }
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({json{{"type", "NFKC"}}, json{{"type", "Lowercase"}}})}};
  EXPECT_EQ(load(j)->encode("\xEF\xBC\xA1" "B", false), (Ids{3})) << "fullwidth A, then lower case";
}

TEST_F(ComponentsTest, SplitBehaviours) {
  json j = toy();
  EXPECT_EQ(load(j)->encode("a-b", false), (Ids{4, 1})) << "no pre-tokenizer: merges run over the whole text";
  j["pre_tokenizer"] = split("-", "Isolated");
  EXPECT_EQ(load(j)->encode("a-b", false), (Ids{0, 2, 1}));
  EXPECT_EQ(load(j)->encode("a--b", false), (Ids{0, 2, 2, 1}));
  j["pre_tokenizer"] = split("-", "Removed");
  EXPECT_EQ(load(j)->encode("a-b", false), (Ids{0, 1}));
  j["pre_tokenizer"] = split("-", "MergedWithPrevious");
  EXPECT_EQ(load(j)->encode("a-b", false), (Ids{4, 1}));
  j["pre_tokenizer"] = split("-", "MergedWithNext");
  EXPECT_EQ(load(j)->encode("a-b", false), (Ids{0, 5}));
  j["pre_tokenizer"] = split("-", "Contiguous");
  EXPECT_EQ(load(j)->encode("a--b", false), (Ids{0, 8, 1}));
  // invert: the non-matches ("a", "b") are the delimiters; Removed drops them.
  j["pre_tokenizer"] = split("-", "Removed", true);
  EXPECT_EQ(load(j)->encode("a-b", false), (Ids{2}));
}

TEST_F(ComponentsTest, DigitsWhitespaceAndSequence) {
  json j = toy();
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_EQ(load(j)->encode("a12", false), (Ids{0, 9, 10}));
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(load(j)->encode("a12", false), (Ids{0, 11}));
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  EXPECT_EQ(load(j)->encode(" ab  a-b ", false), (Ids{3, 4, 1}));
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "WhitespaceSplit"}}, {{"type", "Punctuation"}}}}};
  EXPECT_EQ(load(j)->encode("ab a-b", false), (Ids{3, 0, 2, 1}));
}

TEST_F(ComponentsTest, AddedTokenOptions) {
  json j = toy();
  j["added_tokens"] = {
      {{"id", 6}, {"content", "<s>"}, {"special", true}, {"normalized", false}, {"lstrip", true}},
      {{"id", 7}, {"content", "</s>"}, {"special", true}, {"normalized", false}, {"rstrip", true}},
      {{"id", 13}, {"content", "ab"}, {"special", false}, {"normalized", false}, {"single_word", true}}};
  auto tok = load(j);
  // lstrip eats the spaces before <s>, rstrip those after </s>.
  EXPECT_EQ(tok->encode("a  <s>b", false), (Ids{0, 6, 1}));
  EXPECT_EQ(tok->encode("a</s>  b", false), (Ids{0, 7, 1}));
  EXPECT_EQ(tok->encode("a <s>", false), (Ids{0, 6}));
  // single_word: "ab" only as a whole word (13), not inside "aab" (model: a, ab -> 0, 3).
  EXPECT_EQ(tok->encode("ab", false), (Ids{13}));
  EXPECT_EQ(tok->encode("ab b", false), (Ids{13, 12, 1}));
  EXPECT_EQ(tok->encode("aab", false), (Ids{0, 3}));
  EXPECT_TRUE(tok->is_special(6));
  EXPECT_FALSE(tok->is_special(13));
  EXPECT_EQ(tok->vocab_size(), 14);
  EXPECT_EQ(tok->decode(Ids{13, 6}, true), "ab");
}

TEST_F(ComponentsTest, ContinuingSubwordPrefix) {
  json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", {{"a", 0}, {"##b", 1}, {"ab", 2}, {"b", 3}, {"##a", 4}}},
                {"merges", {"a ##b"}},
                {"continuing_subword_prefix", "##"}};
  auto tok = load(j);
  EXPECT_EQ(tok->encode("ab", false), (Ids{2}));
  EXPECT_EQ(tok->encode("abb", false), (Ids{2, 1}));
  EXPECT_EQ(tok->encode("ba", false), (Ids{3, 4}));
}

TEST_F(ComponentsTest, TemplateProcessingWithEos) {
  json j = toy();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                           {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                         {"pair", json::array()},
                         {"special_tokens",
                          {{"<s>", {{"id", "<s>"}, {"ids", {6}}, {"tokens", {"<s>"}}}},
                           {"</s>", {{"id", "</s>"}, {"ids", {7}}, {"tokens", {"</s>"}}}}}}};
  auto tok = load(j);
  EXPECT_EQ(tok->encode("ab", true), (Ids{6, 3, 7}));
  EXPECT_EQ(tok->encode("ab", false), (Ids{3}));
}

// Decoders: a multi-character Replace after Fuse sees across tokens; Strip's stop trims the end.
TEST_F(ComponentsTest, DecodersWholeAndStreamed) {
  json j;
  j["model"] = {
      {"type", "BPE"}, {"vocab", {{"a_", 0}, {"_b", 1}, {"a ", 2}, {"b ", 3}, {"x", 4}}}, {"merges", json::array()}};
  auto check = [&](const json& decoder, const Ids& ids, const std::string& expected) {
    j["decoder"] = decoder;
    auto tok = load(j);
    EXPECT_EQ(tok->decode(ids), expected) << decoder.dump();
    IncrementalDetokenizer d(*tok);
    std::string streamed = d.push(std::span<const int32_t>(ids));
    streamed += d.finish();
    EXPECT_EQ(streamed, expected) << decoder.dump();
  };
  json replace = {{"type", "Replace"}, {"pattern", {{"String", "__"}}}, {"content", " "}};
  check(replace, {0, 1}, "a__b");  // per token: neither token holds "__"
  check({{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, replace}}}, {0, 1}, "a b");
  json strip_end = {{"type", "Strip"}, {"content", " "}, {"start", 0}, {"stop", 1}};
  check(strip_end, {2, 3}, "ab");  // every token loses its trailing space
  check({{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, strip_end}}}, {2, 3}, "a b");
  check(nullptr, {4, 4}, "x x");  // no decoder: tokens joined with spaces
}

TEST_F(ComponentsTest, StreamingAFusedReplaceHoldsAPartialPattern) {
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", {{"a_", 0}, {"_b", 1}}}, {"merges", json::array()}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders", {{{"type", "Fuse"}}, {{"type", "Replace"}, {"pattern", {{"String", "__"}}}, {"content", " "}}}}};
  auto tok = load(j);
  IncrementalDetokenizer d(*tok);
  EXPECT_EQ(d.push(0), "a");
  EXPECT_EQ(d.push(1), " b");
  EXPECT_EQ(d.finish(), "");
}

// Llama 2 with the newer layout (Metaspace pre-tokenizer, prepend_scheme "first", no split) in place
// of the Prepend/Replace normalizers encodes identically, except that Metaspace prepends no "▁" to
// text that already begins with one (a space).
TEST_F(ComponentsTest, MetaspaceLayoutOfLlama2) {
  std::ifstream in(testing::tokenizer_dir("llama2-spm") / "tokenizer.json");
  json j = json::parse(in);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  auto tok = load(j);
  int compared = 0;
  for (const auto& c : testing::load_cases("llama2-spm")) {
    EXPECT_EQ(tok->decode(c.ids), c.text) << c.text;
    if (!c.text.empty() && c.text[0] == ' ') continue;
    EXPECT_EQ(tok->encode(c.text, false), c.ids) << c.text;
    ++compared;
  }
  EXPECT_GT(compared, 30);
  EXPECT_EQ(tok->encode(" Hello", false), (Ids{15043}));
  // "first": after a leading special token there is no prepended "▁".
  EXPECT_EQ(tok->encode("<s>Hello", false), (Ids{1, 10994}));
  EXPECT_EQ(tok->encode("Hello", false), (Ids{15043}));
  // Metaspace decoder: the first token's "▁" is dropped, the others become spaces.
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  EXPECT_EQ(load(j)->decode(Ids{15043, 3186}), "Hello world");
}

}  // namespace
}  // namespace cypris
