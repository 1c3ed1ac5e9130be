// Random mixed texts and random id sequences against an independent implementation: the fixtures in
// tests/fixtures/tokenizer/ come from @huggingface/tokenizers (JS) via tests/tools/gen_tokenizer_reference.mjs.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/unit/tokenizer/tokenizer_test_util.h"

namespace cypris {
namespace {

// Where two id lists first differ, with a little context, for readable failures.
std::string diff_at(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto slice = [&](const std::vector<int32_t>& v) {
    std::string s;
    for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(v.size(), i + 6); ++k) s += std::to_string(v[k]) + " ";
    return s;
  };
  return "first difference at " + std::to_string(i) + ": got [" + slice(got) + "] want [" + slice(want) + "]";
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, MatchesTheJsReference) {
  const Tokenizer& tok = testing::cached_tokenizer(GetParam());
  std::ifstream in(std::string(CYPRIS_FIXTURES_DIR) + "/tokenizer/" + GetParam() + ".jsonl");
  ASSERT_TRUE(in.good());
  std::string line;
  int texts = 0, id_seqs = 0;
  for (int n = 1; std::getline(in, line); ++n) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("ids_special")) {
      std::string text = j["text"].get<std::string>();
      auto ids = j["ids"].get<std::vector<int32_t>>();
      auto got = tok.encode(text, false);
      EXPECT_EQ(got, ids) << "line " << n << ": " << text << "\n" << diff_at(got, ids);
      EXPECT_EQ(tok.encode(text, true), j["ids_special"].get<std::vector<int32_t>>()) << "line " << n;
      ++texts;
    } else {
      auto ids = j["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(tok.decode(ids, false), j["text"].get<std::string>()) << "line " << n;
      EXPECT_EQ(tok.decode(ids, true), j["text_skip"].get<std::string>()) << "line " << n;
      ++id_seqs;
    }
  }
  EXPECT_EQ(texts, 60);
  EXPECT_EQ(id_seqs, 60);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ReferenceTest,
                         ::testing::Values("llama2-spm", "llama3-bpe", "qwen2-bpe", "gpt2-bpe"));

}  // namespace
}  // namespace cypris
