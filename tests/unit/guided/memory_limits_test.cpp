// Issue #26 item 4: grammar memory grows linearly with nesting (not with its square) and the
// per-grammar mask cache is bounded by bytes (it starts over when full, and its masks stay right).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine/guided/guided_decoding.h"
#include "engine/guided/json_schema.h"
#include "engine/guided/matcher.h"
#include "engine/guided/token_mask.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris::guided {
namespace {

std::string rep(std::string_view s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string nested_objects(int depth, const std::string& name) {
  return rep(R"({"type":"object","properties":{")" + name + "\":", depth) + R"({"type":"integer"})" +
         rep("}}", depth);
}

// Grammar memory grows linearly with nesting: rule names carry at most a short tail of the
// schema path (they used to carry the whole path, so memory grew with depth squared), and long
// property names are shortened in them.
TEST(GuidedSizeLimits, GrammarMemoryIsLinearInNesting) {
  const std::string name(2000, 'n');
  const Grammar g50 = json_schema_grammar(nlohmann::json::parse(nested_objects(50, name)));
  const Grammar g250 = json_schema_grammar(nlohmann::json::parse(nested_objects(250, name)));
  const double ratio = static_cast<double>(g250.memory_bytes()) / static_cast<double>(g50.memory_bytes());
  EXPECT_LT(ratio, 5.0 * 1.3) << g50.memory_bytes() << " -> " << g250.memory_bytes();
  size_t longest = 0;
  for (const auto& n : g250.rule_names) longest = std::max(longest, n.size());
  EXPECT_LT(longest, 200u);
  // The literal property names themselves are in the grammar (2000 bytes x 250 levels, ~12 bytes each).
  EXPECT_LT(g250.memory_bytes(), size_t{32} << 20);
}

std::shared_ptr<const TokenVocab> stories_vocab() {
  static auto v = vocab_from_tokenizer(*load_tokenizer(std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k"), 0, {});
  return v;
}

// A mask cache capped at a few KB starts over when full and still gives the brute-force masks.
TEST(GuidedSizeLimits, MaskCacheIsBoundedByBytes) {
  auto v = stories_vocab();
  const Grammar g = json_schema_grammar(nlohmann::json::parse(
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{"b":{"type":"string"},"c":{"type":"integer"}}}},"d":{"enum":["x","yy"]}}})"));
  auto masker = std::make_shared<TokenMasker>(std::make_shared<Grammar>(g), v, /*max_cache_bytes=*/2048);
  GuidedMatcher m(masker);
  StackArena ref_arena(masker->grammar_ptr());
  std::vector<uint32_t> fast(masker->mask_words()), slow(masker->mask_words());
  std::vector<int32_t> path;
  uint64_t x = 88172645463325252ull;
  for (int step = 0; step < 80; ++step) {
    m.fill_mask(fast);
    EXPECT_LE(masker->memory_bytes(), g.memory_bytes() + 65536);  // the cap plus one entry
    Stepper st(ref_arena);
    MatchState s = st.initial();
    for (int32_t t : path) ASSERT_TRUE(st.advance(s, v->bytes[t]));
    masker->fill_brute_force(ref_arena, s, slow);
    ASSERT_EQ(fast, slow) << "step " << step;
    std::vector<int32_t> choices;
    for (int32_t id = 0; id < v->size; ++id)
      if (((fast[id >> 5] >> (id & 31)) & 1u) && !v->bytes[id].empty()) choices.push_back(id);
    if (choices.empty()) break;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const int32_t t = choices[x % choices.size()];
    ASSERT_TRUE(m.accept(t));
    path.push_back(t);
  }
  EXPECT_GT(masker->cache_resets(), 0u) << "the cap never came into play";
}

}  // namespace
}  // namespace cypris::guided
