// Token masks against the brute-force reference: at random reachable states of several grammars,
// the cached mask must equal the mask from running every token's bytes through the matcher — for a
// SentencePiece vocabulary with byte fallback (stories260k, llama2) and byte-level BPE (Llama 3).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "engine/guided/ebnf.h"
#include "engine/guided/guided_decoding.h"
#include "engine/guided/json_schema.h"
#include "engine/guided/regex_grammar.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris::guided {
namespace {

const std::string kTestdata = CYPRIS_TESTDATA_DIR;

std::shared_ptr<const TokenVocab> vocab_of(const std::string& dir) {
  static std::map<std::string, std::shared_ptr<const TokenVocab>> cache;
  auto& v = cache[dir];
  if (!v) v = vocab_from_tokenizer(*load_tokenizer(dir), 0, {});
  return v;
}

std::vector<int32_t> bits_of(std::span<const uint32_t> mask, int32_t n) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n; ++i)
    if ((mask[i >> 5] >> (i & 31)) & 1u) ids.push_back(i);
  return ids;
}

// Walks `steps` random tokens through the grammar, comparing masks at every state.
void compare_on_random_walk(const Grammar& g, std::shared_ptr<const TokenVocab> v, int steps, uint64_t seed) {
  auto masker = std::make_shared<TokenMasker>(std::make_shared<Grammar>(g), v);
  GuidedMatcher m(masker);
  StackArena ref_arena(masker->grammar_ptr());
  std::vector<uint32_t> fast(masker->mask_words()), slow(masker->mask_words());
  std::mt19937_64 rng(seed);
  std::vector<int32_t> path;
  for (int step = 0; step < steps; ++step) {
    m.fill_mask(fast);
    // The reference state: the same tokens replayed from scratch in a separate arena.
    Stepper st(ref_arena);
    MatchState s = st.initial();
    for (int32_t t : path) ASSERT_TRUE(st.advance(s, v->bytes[t]));
    masker->fill_brute_force(ref_arena, s, slow);
    auto a = bits_of(fast, v->size), b = bits_of(slow, v->size);
    ASSERT_EQ(a, b) << "step " << step << " after " << path.size() << " tokens";
    if (a.empty()) break;
    std::vector<int32_t> choices;
    for (int32_t id : a)
      if (!v->bytes[id].empty()) choices.push_back(id);
    if (choices.empty()) break;  // only EOS left
    int32_t t = choices[rng() % choices.size()];
    ASSERT_TRUE(m.accept(t));
    path.push_back(t);
  }
}

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":-5,"maximum":130},
  "tags":{"type":"array","items":{"type":"string","enum":["red","green","x\"y"]},"maxItems":3},
  "ok":{"type":"boolean"},"when":{"type":"string","format":"date"},"score":{"type":"number"},
  "child":{"anyOf":[{"type":"null"},{"type":"object","properties":{"id":{"type":"string","pattern":"[a-f0-9]{4}"}},
   "required":["id"]}]}},"required":["name","ok"]})";

TEST(GuidedTokenMask, MatchesBruteForceStories260k) {
  auto v = vocab_of(kTestdata + "/models/stories260k");
  EXPECT_EQ(v->size, 512);
  Grammar js = json_schema_grammar(nlohmann::json::parse(kSchema));
  for (uint64_t seed = 1; seed <= 12; ++seed) compare_on_random_walk(js, v, 60, seed);
  compare_on_random_walk(json_object_grammar(), v, 60, 99);
  compare_on_random_walk(regex_grammar("(The|Once) [a-z ]{3,20}\\.( [A-Z][a-z]+){0,3}"), v, 40, 5);
  compare_on_random_walk(gbnf_grammar("root ::= (\"yes\" | \"no\" | \"maybe so\") (\", \" [a-z]+)* \"\\n\"\n"), v, 30, 6);
}

TEST(GuidedTokenMask, MatchesBruteForceLlama2SentencePiece) {
  auto v = vocab_of(kTestdata + "/tokenizers/llama2-spm");
  Grammar js = json_schema_grammar(nlohmann::json::parse(kSchema));
  // Few steps: every brute-force mask runs all 32k tokens through the matcher.
  compare_on_random_walk(js, v, 10, 1);
  // Non-ASCII text: byte-fallback tokens carry parts of a character.
  compare_on_random_walk(regex_grammar("[äöü€✓]{1,6} ok"), v, 6, 3);
}

TEST(GuidedTokenMask, MatchesBruteForceLlama3ByteLevel) {
  auto v = vocab_of(kTestdata + "/tokenizers/llama3-bpe");
  EXPECT_GE(v->size, 128000);
  Grammar js = json_schema_grammar(nlohmann::json::parse(kSchema));
  compare_on_random_walk(js, v, 4, 7);
  compare_on_random_walk(regex_grammar("[äöü€✓ ]{1,6}\\d+"), v, 3, 8);
}

TEST(GuidedTokenMask, EndTokensOnlyWhenTheGrammarCanEnd) {
  auto v = vocab_of(kTestdata + "/models/stories260k");
  ASSERT_FALSE(v->end_ids.empty());
  const int32_t eos = v->end_ids[0];
  auto masker = std::make_shared<TokenMasker>(std::make_shared<Grammar>(regex_grammar("ab?")), v);
  GuidedMatcher m(masker);
  std::vector<uint32_t> mask(masker->mask_words());
  auto allowed = [&](int32_t id) { return ((mask[id >> 5] >> (id & 31)) & 1u) != 0; };
  m.fill_mask(mask);
  EXPECT_FALSE(allowed(eos));
  int32_t a = -1;
  for (int32_t id = 0; id < v->size; ++id)
    if (v->bytes[id] == "a") a = id;
  ASSERT_GE(a, 0);
  EXPECT_TRUE(allowed(a));
  ASSERT_TRUE(m.accept(a));
  m.fill_mask(mask);
  EXPECT_TRUE(allowed(eos));
  EXPECT_FALSE(allowed(a));
  EXPECT_FALSE(m.terminated());
  // Special tokens (BOS, UNK) never pass.
  EXPECT_FALSE(allowed(1));
  EXPECT_FALSE(allowed(0));
  m.rollback(1);
  m.fill_mask(mask);
  EXPECT_FALSE(allowed(eos));
  EXPECT_TRUE(allowed(a));
}

}  // namespace
}  // namespace cypris::guided
