// Streaming detokenization: token-by-token deltas must add up to exactly one full decode, and no
// delta may end inside a UTF-8 character.
#include "engine/tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "engine/tokenizer/unicode.h"
#include "tests/unit/tokenizer/tokenizer_test_util.h"

namespace cypris {
namespace {

using testing::cached_tokenizer;

struct StreamCase {
  std::string tokenizer;
  std::string mode;
};

class StreamPropertyTest : public ::testing::TestWithParam<StreamCase> {};

// Random ids exercise what real text rarely does: byte tokens that never complete a character,
// special tokens between byte runs, leading-space pieces in the middle.
TEST_P(StreamPropertyTest, RandomIdsStreamToExactlyTheFullDecode) {
  const Tokenizer& tok = cached_tokenizer(GetParam().tokenizer, GetParam().mode);
  std::mt19937 rng(1234);
  int32_t n = tok.vocab_size();
  std::uniform_int_distribution<int32_t> any_id(0, n - 1);
  std::uniform_int_distribution<int32_t> low_id(0, std::min(n - 1, 300));  // byte pieces live here
  std::uniform_int_distribution<int> len(0, 40);
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<int32_t> ids(size_t(len(rng)));
    for (auto& id : ids) id = (rng() % 3 == 0) ? low_id(rng) : any_id(rng);
    if (trial % 7 == 0 && !ids.empty()) ids[0] = n - 1;  // an added/special token up front
    for (bool skip : {true, false}) {
      for (bool spaces : {true, false}) {
        IncrementalDetokenizer detok(tok, {skip, spaces});
        std::string streamed;
        for (int32_t id : ids) {
          std::string delta = detok.push(id);
          ASSERT_TRUE(unicode::is_valid_utf8(delta)) << "trial " << trial;
          streamed += delta;
        }
        streamed += detok.finish();
        ASSERT_EQ(streamed, tok.decode(ids, skip, spaces))
            << "trial " << trial << " skip " << skip << " spaces " << spaces;
        ASSERT_EQ(detok.text(), streamed);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, StreamPropertyTest,
                         ::testing::Values(StreamCase{"llama2-spm", "auto"}, StreamCase{"llama2-spm", "slow"},
                                           StreamCase{"llama3-bpe", "auto"}, StreamCase{"qwen2-bpe", "auto"},
                                           StreamCase{"qwen2-bpe", "slow"}, StreamCase{"gpt2-bpe", "auto"}),
                         [](const auto& info) {
                           std::string s = info.param.tokenizer + "_" + info.param.mode;
                           for (auto& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// A Tokenizer without its own DecodeStream gets the generic re-decoding one.
class BytesTokenizer : public Tokenizer {
 public:
  // id i < 256 is byte i.
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string decode(std::span<const int32_t> ids, bool, bool) const override {
    std::string bytes;
    for (int32_t id : ids) bytes += char(id);
    return unicode::to_valid_utf8(bytes);
  }
  int32_t vocab_size() const override { return 256; }
  std::string id_to_piece(int32_t id) const override { return std::string(1, char(id)); }
  std::optional<int32_t> piece_to_id(std::string_view) const override { return std::nullopt; }
  bool is_special(int32_t) const override { return false; }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> pad_id() const override { return std::nullopt; }
  std::optional<int32_t> unk_id() const override { return std::nullopt; }
  std::string bos_token() const override { return ""; }
  std::string eos_token() const override { return ""; }
  const std::vector<NamedChatTemplate>& chat_templates() const override { return templates_; }
  std::optional<int64_t> model_max_length() const override { return std::nullopt; }

 private:
  std::vector<NamedChatTemplate> templates_;
};

TEST(IncrementalDetokenizer, GenericStreamForOtherTokenizers) {
  BytesTokenizer tok;
  std::string text = "a\xF0\x9F\xA6\x99 b\xC3\xA9";
  IncrementalDetokenizer d(tok);
  std::vector<std::string> deltas;
  for (int32_t id : tok.encode(text, false)) deltas.push_back(d.push(uint8_t(id)));
  EXPECT_EQ(deltas[1], "");  // inside the emoji
  EXPECT_EQ(deltas[4], "\xF0\x9F\xA6\x99");
  EXPECT_EQ(d.text() + d.finish(), text);
}

TEST(IncrementalDetokenizer, HoldsBackAnIncompleteCharacter) {
  // Llama 2 spells the llama emoji with four byte tokens.
  const Tokenizer& tok = cached_tokenizer("llama2-spm");
  IncrementalDetokenizer detok(tok);
  EXPECT_EQ(detok.push(445), "this");  // "▁this": the first token's space is dropped
  EXPECT_EQ(detok.push(29871), " ");   // "▁": certain at once
  EXPECT_EQ(detok.push(243), "");
  EXPECT_EQ(detok.push(162), "");
  EXPECT_EQ(detok.push(169), "");
  EXPECT_EQ(detok.push(156), "");                     // a byte run is judged when it ends
  EXPECT_EQ(detok.push(29889), "\xF0\x9F\xA6\x99.");  // "🦙."
  EXPECT_EQ(detok.finish(), "");
}

TEST(IncrementalDetokenizer, ByteLevelEmitsEachCharacterWhenComplete) {
  const Tokenizer& tok = cached_tokenizer("gpt2-bpe");
  auto ids = tok.encode("a 🦙 b", false);
  IncrementalDetokenizer detok(tok);
  std::vector<std::string> deltas;
  for (int32_t id : ids) deltas.push_back(detok.push(id));
  deltas.push_back(detok.finish());
  std::string all;
  for (const auto& d : deltas) {
    EXPECT_TRUE(unicode::is_valid_utf8(d));
    all += d;
  }
  EXPECT_EQ(all, "a 🦙 b");
  EXPECT_EQ(deltas.back(), "");  // nothing was left over for finish()
}

TEST(IncrementalDetokenizer, IncompleteCharacterAtTheEndBecomesReplacement) {
  const Tokenizer& tok = cached_tokenizer("llama3-bpe");
  auto ids = tok.encode("🦙", false);
  ASSERT_GE(ids.size(), 2u);
  ids.pop_back();
  IncrementalDetokenizer detok(tok);
  EXPECT_EQ(detok.push(std::span<const int32_t>(ids)), "");
  EXPECT_EQ(detok.finish(), "\xEF\xBF\xBD");
}

TEST(IncrementalDetokenizer, PromptContextKeepsTheLeadingSpace) {
  const Tokenizer& tok = cached_tokenizer("llama2-spm");
  auto prompt = tok.encode("Say hello", true);
  IncrementalDetokenizer with_context(tok, {}, prompt);
  EXPECT_EQ(with_context.push(15043), " Hello");
  IncrementalDetokenizer alone(tok);
  EXPECT_EQ(alone.push(15043), "Hello");
}

// A prompt ending in a byte-fallback piece (ChatML's "<|im_start|>assistant\n" in a SentencePiece
// vocabulary): the decoder holds "\n" back to see whether more bytes follow; that text belongs to the
// prompt, so the answer must not start with it (it did: every stories260k chat answer began "\n").
TEST(IncrementalDetokenizer, PromptContextEndingInAByteNewlineLeavesItOut) {
  const Tokenizer& tok = cached_tokenizer("llama2-spm");
  const auto prompt = tok.encode("Say hello\n", true);
  ASSERT_EQ(tok.id_to_piece(prompt.back()), "<0x0A>");
  IncrementalDetokenizer detok(tok, {}, prompt);
  const std::string hello = detok.push(15043);
  EXPECT_EQ(hello.find('\n'), std::string::npos) << hello;
  EXPECT_EQ(hello, " Hello");
  // An incomplete character left by the prompt still completes in the output.
  const auto euro = tok.encode("\xE2\x82\xAC", false);  // "€", three byte pieces if not in the vocab
  if (euro.size() == 3 && tok.id_to_piece(euro[0]).rfind("<0x", 0) == 0) {
    IncrementalDetokenizer split(tok, {}, std::vector<int32_t>{prompt.front(), euro[0], euro[1]});
    EXPECT_EQ(split.push(euro[2]) + split.finish(), "\xE2\x82\xAC");
  }
}

TEST(IncrementalDetokenizer, SkipsSpecialTokensOnRequest) {
  const Tokenizer& tok = cached_tokenizer("llama3-bpe");
  std::vector<int32_t> ids = {9906, 128009};
  IncrementalDetokenizer skip(tok, {true, true});
  EXPECT_EQ(skip.push(std::span<const int32_t>(ids)) + skip.finish(), "Hello");
  IncrementalDetokenizer keep(tok, {false, true});
  EXPECT_EQ(keep.push(std::span<const int32_t>(ids)) + keep.finish(), "Hello<|eot_id|>");
}

TEST(IncrementalDetokenizer, SlowFilesSpaceAddedTokensLikeTransformers) {
  // Qwen2's added tokens are beyond the vocab.json ids, so Transformers' slow class puts spaces
  // around them when spaces_between_special_tokens is set; tokenizer.json (fast) does not.
  const Tokenizer& slow = cached_tokenizer("qwen2-bpe", "slow");
  const Tokenizer& fast = cached_tokenizer("qwen2-bpe");
  auto ids = fast.encode("<|im_start|>user\nHi<|im_end|>", false);
  EXPECT_EQ(slow.decode(ids, false, true), "<|im_start|> user\nHi <|im_end|>");
  EXPECT_EQ(slow.decode(ids, false, false), "<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(fast.decode(ids, false, true), "<|im_start|>user\nHi<|im_end|>");
}

}  // namespace
}  // namespace cypris
