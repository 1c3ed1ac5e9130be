// Encoding and decoding the test-data tokenizers against the ids Hugging Face tokenizers gives
// (testdata/tokenizers/*/cases.jsonl), and the different files of one model against each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "tests/unit/tokenizer/tokenizer_test_util.h"

namespace cypris {
namespace {

using testing::cached_tokenizer;
using testing::load_cases;

class CasesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CasesTest, EncodesEveryCaseToItsIds) {
  const Tokenizer& tok = cached_tokenizer(GetParam());
  auto cases = load_cases(GetParam());
  ASSERT_EQ(cases.size(), 46u);
  for (const auto& c : cases) EXPECT_EQ(tok.encode(c.text, false), c.ids) << "text: '" << c.text << "'";
}

TEST_P(CasesTest, DecodesEveryCaseBackToItsText) {
  const Tokenizer& tok = cached_tokenizer(GetParam());
  for (const auto& c : load_cases(GetParam())) EXPECT_EQ(tok.decode(c.ids), c.text) << "text: '" << c.text << "'";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, CasesTest, ::testing::Values("llama2-spm", "llama3-bpe", "qwen2-bpe", "gpt2-bpe"));

// mode "slow" picks tokenizer.model (llama2) or vocab.json+merges.txt / encoder.json+vocab.bpe.
class SlowFilesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SlowFilesTest, AgreesWithTokenizerJsonOnEveryCase) {
  const Tokenizer& fast = cached_tokenizer(GetParam());
  const Tokenizer& slow = cached_tokenizer(GetParam(), "slow");
  for (const auto& c : load_cases(GetParam())) {
    EXPECT_EQ(slow.encode(c.text, false), c.ids) << "text: '" << c.text << "'";
    EXPECT_EQ(slow.decode(c.ids), c.text) << "text: '" << c.text << "'";
    EXPECT_EQ(slow.encode(c.text, true), fast.encode(c.text, true)) << "text: '" << c.text << "'";
  }
  EXPECT_EQ(slow.bos_id(), fast.bos_id());
  EXPECT_EQ(slow.eos_id(), fast.eos_id());
}

// Long enough for the SentencePiece path to encode in chunks.
TEST_P(SlowFilesTest, AgreesWithTokenizerJsonOnLongText) {
  const Tokenizer& fast = cached_tokenizer(GetParam());
  const Tokenizer& slow = cached_tokenizer(GetParam(), "slow");
  std::string text;
  for (int r = 0; r < 8; ++r)
    for (const auto& c : load_cases(GetParam())) text += c.text + (r % 2 ? " " : "  ");
  ASSERT_GT(text.size(), 8000u);
  auto ids = fast.encode(text, false);
  EXPECT_EQ(slow.encode(text, false), ids);
  EXPECT_EQ(slow.decode(ids), text);
  EXPECT_EQ(fast.decode(ids), text);
}

// Llama 3's folder also has encoder.json + vocab.bpe, but its class (PreTrainedTokenizerFast) does
// not say how to split text, so "slow" keeps tokenizer.json.
TEST(TokenizerModes, SlowModeKeepsTokenizerJsonForLlama3) {
  const Tokenizer& tok = cached_tokenizer("llama3-bpe", "slow");
  for (const auto& c : load_cases("llama3-bpe")) EXPECT_EQ(tok.encode(c.text, false), c.ids) << c.text;
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, SlowFilesTest, ::testing::Values("llama2-spm", "qwen2-bpe", "gpt2-bpe"));

TEST(TokenizerSpecialTokens, Llama3AddsBeginOfTextFromThePostProcessor) {
  const Tokenizer& tok = cached_tokenizer("llama3-bpe");
  EXPECT_EQ(tok.encode("Hello world", true), (std::vector<int32_t>{128000, 9906, 1917}));
  EXPECT_EQ(tok.encode("Hello world", false), (std::vector<int32_t>{9906, 1917}));
  EXPECT_EQ(tok.bos_id(), 128000);
  EXPECT_EQ(tok.eos_id(), 128009);  // <|eot_id|> per tokenizer_config.json
  EXPECT_EQ(tok.bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(tok.vocab_size(), 128256);
  EXPECT_TRUE(tok.is_special(128006));
  EXPECT_FALSE(tok.is_special(9906));
}

TEST(TokenizerSpecialTokens, Qwen2AddsNoBos) {
  const Tokenizer& tok = cached_tokenizer("qwen2-bpe");
  EXPECT_EQ(tok.encode("Hello world", true), tok.encode("Hello world", false));
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_EQ(tok.eos_id(), 151645);
  EXPECT_EQ(tok.pad_id(), 151643);
  EXPECT_EQ(tok.model_max_length(), 131072);
  ASSERT_EQ(tok.chat_templates().size(), 1u);
  EXPECT_NE(tok.chat_templates()[0].source.find("im_start"), std::string::npos);
}

TEST(TokenizerSpecialTokens, Llama2AddsBos) {
  for (const char* mode : {"auto", "slow"}) {
    const Tokenizer& tok = cached_tokenizer("llama2-spm", mode);
    EXPECT_EQ(tok.encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186})) << mode;
    EXPECT_EQ(tok.bos_token(), "<s>");
    EXPECT_EQ(tok.eos_token(), "</s>");
    EXPECT_FALSE(tok.model_max_length().has_value()) << "1e30 means no limit";
  }
}

TEST(TokenizerSpecialTokens, SpecialTokensInTextAreRecognised) {
  const Tokenizer& q = cached_tokenizer("qwen2-bpe");
  auto ids = q.encode("<|im_start|>user\nHi<|im_end|>", false);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids.back(), 151645);
  EXPECT_EQ(q.decode(ids, false), "<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(q.decode(ids, true), "user\nHi");

  const Tokenizer& l3 = cached_tokenizer("llama3-bpe");
  auto ids3 = l3.encode("<|start_header_id|>assistant<|end_header_id|>\n\nHello", false);
  EXPECT_EQ(ids3, (std::vector<int32_t>{128006, 78191, 128007, 271, 9906}));
}

// Llama 2's tokenizer.json marks <s> normalized: it is matched in normalized text in its normalized
// form "▁<s>", so it takes the space before it, and is not recognised glued to a word.
TEST(TokenizerSpecialTokens, Llama2NormalizedSpecialTokens) {
  const Tokenizer& tok = cached_tokenizer("llama2-spm");
  EXPECT_EQ(tok.encode("Hello <s> world", false), (std::vector<int32_t>{15043, 1, 3186}));
  auto glued = tok.encode("model<s>", false);
  EXPECT_EQ(std::count(glued.begin(), glued.end(), 1), 0);
}

TEST(TokenizerSpecialTokens, PiecesRoundTrip) {
  const Tokenizer& l3 = cached_tokenizer("llama3-bpe");
  EXPECT_EQ(l3.id_to_piece(1917), "\xC4\xA0world");  // "Ġworld"
  EXPECT_EQ(l3.piece_to_id("\xC4\xA0world"), 1917);
  EXPECT_EQ(l3.piece_to_id("<|eot_id|>"), 128009);
  EXPECT_FALSE(l3.piece_to_id("no such piece at all").has_value());
  EXPECT_EQ(l3.id_to_piece(-1), "");
  EXPECT_EQ(l3.id_to_piece(1 << 20), "");
  const Tokenizer& l2 = cached_tokenizer("llama2-spm", "slow");
  EXPECT_EQ(l2.id_to_piece(15043), "\xE2\x96\x81Hello");
  EXPECT_EQ(l2.piece_to_id("\xE2\x96\x81Hello"), 15043);
  EXPECT_FALSE(l2.piece_to_id("no such piece at all").has_value());
}

TEST(TokenizerSpecialTokens, InvalidUtf8InputIsRepairedNotFatal) {
  const Tokenizer& l3 = cached_tokenizer("llama3-bpe");
  std::string bad = "ok \xFF\xFE end";
  EXPECT_EQ(l3.decode(l3.encode(bad, false)), "ok \xEF\xBF\xBD\xEF\xBF\xBD end");
}

// The word cache and regex state are shared: encoding from several threads at once must give what
// one thread gives.
TEST(TokenizerThreads, ConcurrentEncodesAgreeWithSerialOnes) {
  const Tokenizer& tok = cached_tokenizer("llama3-bpe");
  auto cases = load_cases("llama3-bpe");
  std::vector<std::vector<int32_t>> expected;
  for (const auto& c : cases) expected.push_back(c.ids);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 50; ++r)
        for (size_t i = 0; i < cases.size(); ++i) {
          size_t k = (i + size_t(t) * 7 + size_t(r)) % cases.size();
          if (tok.encode(cases[k].text, false) != expected[k]) ++mismatches;
        }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Long runs that make regexes backtrack and BPE words huge must still round-trip.
TEST(TokenizerLongInputs, PathologicalRunsRoundTrip) {
  std::vector<std::string> inputs = {std::string(200000, ' ') + "a", std::string(100000, '\n') + " x",
                                     std::string(200000, '7'), "x" + std::string(100000, 'a')};
  std::string cjk;
  for (int i = 0; i < 30000; ++i) cjk += "\xE4\xB8\xAD";  // 中
  inputs.push_back(cjk);
  for (const char* name : {"llama3-bpe", "qwen2-bpe", "gpt2-bpe", "llama2-spm"}) {
    const Tokenizer& tok = cached_tokenizer(name);
    for (const auto& in : inputs) {
      auto ids = tok.encode(in, false);
      EXPECT_EQ(tok.decode(ids), in) << name << " input of " << in.size() << " bytes";
    }
  }
}

TEST(TokenizerModels, Stories260kRoundTripsASentence) {
  const Tokenizer& tok =
      cached_tokenizer((std::filesystem::path(CYPRIS_TESTDATA_DIR) / "models" / "stories260k").string());
  EXPECT_EQ(tok.vocab_size(), 512);
  std::string text = "Once upon a time, there was a little girl named Lily. She liked to play outside.";
  auto ids = tok.encode(text, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
  for (int32_t id : ids) EXPECT_LT(id, 512);
  // A 512-token vocabulary splits words into several pieces.
  EXPECT_GT(ids.size(), 20u);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.decode(ids, false), "<s> " + text);
}

}  // namespace
}  // namespace cypris
