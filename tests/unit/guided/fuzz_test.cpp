// Seeded fuzzing of the guided-decoding front ends (issue #26): regex, GBNF, Lark and JSON Schema
// inputs generated with deep nesting (around and far past the nesting limit), long runs of
// quantifiers, long rule chains, self-references and surrogate escapes, then mutated
// byte-wise. The contract: every input compiles or is refused with cypris::Error (nothing else
// escapes, nothing crashes or hangs), and a grammar that compiles can be walked by the matcher
// (random bytes it allows, until it may end or 64 bytes) without a dead end; a walk may stop with
// the parse-stack bound's named error (counted: grammars whose parses multiply). The same inputs every run (fixed seeds);
// CYPRIS_FUZZ_ITERATIONS runs longer locally.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "engine/common/error.h"
#include "engine/guided/guided_decoding.h"
#include "engine/guided/matcher.h"

namespace cypris::guided {
namespace {

int iterations(int def) {
  const char* e = std::getenv("CYPRIS_FUZZ_ITERATIONS");
  return e ? std::max(1, std::atoi(e)) : def;
}

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  size_t pick(size_t n) { return n ? std::uniform_int_distribution<size_t>(0, n - 1)(rng_) : 0; }
  bool coin(int one_in) { return pick(static_cast<size_t>(one_in)) == 0; }
  // A nesting depth: mostly small, sometimes around the limit, sometimes far past it.
  int depth() {
    switch (pick(6)) {
      case 0: return static_cast<int>(kMaxNestingDepth - 4 + pick(9));
      case 1: return static_cast<int>(300 + pick(20000));
      default: return static_cast<int>(pick(12));
    }
  }
  // A run length: mostly short, sometimes long.
  int run() { return coin(4) ? static_cast<int>(50 + pick(3000)) : static_cast<int>(1 + pick(3)); }
  std::string rep(const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  }
  template <typename T>
  const T& one_of(const std::vector<T>& v) {
    return v[pick(v.size())];
  }

  // Byte-level mutations with syntax-heavy tokens.
  std::string mutate(std::string s, const std::vector<std::string>& tokens) {
    const int rounds = static_cast<int>(pick(4));
    for (int r = 0; r < rounds; ++r) {
      switch (pick(4)) {
        case 0:
          if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 + pick(255));
          break;
        case 1:
          s.insert(pick(s.size() + 1), one_of(tokens));
          break;
        case 2:
          if (!s.empty()) {
            const size_t a = pick(s.size());
            s.erase(a, 1 + pick(std::min<size_t>(16, s.size() - a)));
          }
          break;
        default:
          if (!s.empty()) {
            const size_t a = pick(s.size());
            const size_t n = 1 + pick(std::min<size_t>(32, s.size() - a));
            const std::string piece = s.substr(a, n);
            s.insert(pick(s.size() + 1), rep(piece, 1 + static_cast<int>(pick(coin(5) ? 2000 : 3))));
          }
      }
    }
    return s;
  }

 private:
  std::mt19937_64 rng_;
};

// ---- generators ---------------------------------------------------------------------------------

std::string regex_atom(Gen& g) {
  static const std::vector<std::string> atoms = {"a", "b", "\\d", "\\w", "[a-z]", "[^\\s\\S]", ".", "\\uD800",
                                                 "\\x{10FFFF}", "\\u00e9", "é", "[\\d_-]", "\\.", "x{2,3}"};
  return g.one_of(atoms);
}

std::string regex(Gen& g) {
  std::string core = regex_atom(g);
  const int d = g.depth();
  static const std::vector<std::string> opens = {"(", "(?:", "(?<n>"};
  for (int i = 0; i < d; ++i) {
    switch (g.pick(4)) {
      case 0: core = g.one_of(opens) + core + ")"; break;
      case 1: core = "(" + core + "|" + regex_atom(g) + ")"; break;
      case 2: core = "(" + regex_atom(g) + core + ")"; break;
      default: core = "(" + core + ")" + g.one_of(std::vector<std::string>{"*", "+", "?", "{1,3}", "*?"});
    }
  }
  static const std::vector<std::string> quants = {"*", "+", "?", "{2}", "{0,2}", "*?"};
  core += g.rep(g.one_of(quants), g.coin(3) ? g.run() : 0);
  return core;
}

std::string ebnf_atom(Gen& g, bool lark) {
  static const std::vector<std::string> gbnf = {"\"a\"", "[a-c]", "[^x]", ".", "\"\\u00e9\"", "\"\\uD800\"",
                                                "\"\\U7FFFFFFF\"", "r1", "\"\\x41\""};
  static const std::vector<std::string> lk = {"\"a\"", "\"a\"i", "/[a-c]+/", "\"a\"..\"z\"", "r1", "\"\\uD800\"",
                                              "INT", "\"\\U0001F600\""};
  return g.one_of(lark ? lk : gbnf);
}

std::string ebnf(Gen& g, bool lark) {
  std::string core = ebnf_atom(g, lark);
  const int d = g.depth();
  for (int i = 0; i < d; ++i) {
    switch (g.pick(4)) {
      case 0: core = "(" + core + ")"; break;
      case 1: core = "(" + core + " | " + ebnf_atom(g, lark) + ")"; break;
      case 2: core = lark ? "[" + core + "]" : "(" + core + ")?"; break;
      default: core = "(" + ebnf_atom(g, lark) + " " + core + ")*";
    }
  }
  static const std::vector<std::string> gq = {"*", "+", "?", "{2}", "{1,3}"};
  static const std::vector<std::string> lq = {"*", "+", "?", "~ 2", "~ 1..3"};
  core += g.rep(g.one_of(lark ? lq : gq), g.coin(3) ? g.run() : 0);
  const std::string def = lark ? ": " : " ::= ";
  std::string text = std::string(lark ? "start" : "root") + def + core + "\n";
  // r1: a chain of rules (short or long), sometimes ending in itself (no way out).
  const int chain = g.coin(4) ? static_cast<int>(g.pick(5000)) : static_cast<int>(g.pick(3));
  for (int i = 1; i <= chain; ++i)
    text += "r" + std::to_string(i) + def + "r" + std::to_string(i + 1) + " | \"x\"\n";
  text += "r" + std::to_string(chain + 1) + def + (g.coin(4) ? "r" + std::to_string(chain + 1) : "\"y\"") + "\n";
  if (lark && g.coin(3)) text += "%import common.INT\n";
  return text;
}

nlohmann::json schema(Gen& g, int depth) {
  using nlohmann::json;
  if (depth <= 0) {
    static const std::vector<json> leaves = {
        {{"type", "integer"}},
        {{"type", "string"}, {"maxLength", 3}},
        {{"type", "string"}, {"pattern", "[a-c]+\\d"}},
        {{"enum", {"x", 1, nullptr}}},
        {{"type", "number"}, {"minimum", -5}, {"maximum", 5}},
        {{"$ref", "#"}},
        {{"$ref", "#/$defs/d"}},
        {{"type", "boolean"}},
        {{"const", {{"k", {1, 2}}}}},
    };
    return g.one_of(leaves);
  }
  json inner = schema(g, depth - 1);
  switch (g.pick(6)) {
    case 0: return {{"type", "object"}, {"properties", {{"p", inner}}}, {"required", {"p"}}};
    case 1: return {{"type", "array"}, {"items", inner}, {"maxItems", 2}};
    case 2: return {{"anyOf", {inner, {{"type", "null"}}}}};
    case 3: return {{"allOf", {inner}}};
    case 4: return {{"type", "object"}, {"additionalProperties", inner}};
    default: return {{"oneOf", {{{"type", "integer"}}, inner}}};
  }
}

std::string schema_text(Gen& g) {
  // Deep schemas are written as text (building them as values would recurse in the test itself).
  const int d = g.depth();
  if (d > 64) {
    const bool arrays = g.coin(2);
    const std::string open = arrays ? R"({"type":"array","items":)" : R"({"type":"object","properties":{"a":)";
    const std::string close = arrays ? "}" : "}}";
    return g.rep(open, d) + R"({"type":"integer"})" + g.rep(close, d);
  }
  nlohmann::json s = schema(g, d);
  if (g.coin(2)) s["$defs"] = {{"d", g.coin(2) ? nlohmann::json{{"$ref", "#/$defs/d"}} : schema(g, 2)}};
  if (g.coin(6)) s["$defs"] = {{"d", {{"type", "string"}, {"pattern", regex(g)}}}};
  return s.dump();
}

// ---- the contract ------------------------------------------------------------------------------

struct Tally {
  int runs = 0, compiled = 0, refused = 0, stack_bound = 0;
};

void walk(const Grammar& g, Gen& gen) {
  StackArena arena(std::make_shared<Grammar>(g));
  Stepper st(arena);
  MatchState s = st.initial();
  for (int i = 0; i < 64 && !s.tops.empty(); ++i) {
    const ByteSet next = st.next_bytes(s);
    ASSERT_TRUE(next.any()) << "a live state allows no byte";
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b)
      if (next.test(b)) bytes.push_back(b);
    s = st.advance(s, static_cast<uint8_t>(bytes[gen.pick(bytes.size())]));
    ASSERT_FALSE(s.dead()) << "the matcher died on a byte it allowed";
  }
}

void run(const char* what, uint64_t seed, int n, const std::function<GuidedDecodingParams(Gen&)>& make) {
  Gen gen(seed);
  Tally t;
  for (int i = 0; i < n; ++i) {
    GuidedDecodingParams p = make(gen);
    ++t.runs;
    try {
      auto g = compile(p);
      ++t.compiled;
      try {
        walk(*g, gen);
      } catch (const Error&) {
        // The parse-stack bound (kMaxStackNodes) stopped a grammar whose parses multiply (stacked
        // {0,2} quantifiers): bounded, named, but a grammar the compiler should have refused.
        ++t.stack_bound;
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << " input " << i << ": the matcher threw on a compiled grammar: " << e.what() << "\n"
                      << p.text.substr(0, 400);
      }
    } catch (const Error&) {
      ++t.refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << " input " << i << " escaped as " << typeid(e).name() << ": " << e.what() << "\n"
                    << p.text.substr(0, 400);
    }
  }
  std::printf("[fuzz] guided %s: %d executions, %d compiled, %d refused with a named error, %d walks stopped by "
              "the parse-stack bound\n",
              what, t.runs, t.compiled, t.refused, t.stack_bound);
  ::testing::Test::RecordProperty(std::string("guided_") + what + "_executions", t.runs);
}

const std::vector<std::string> kRegexTokens = {"(", ")", "*", "+", "?", "{2,5}", "[", "]", "|", "\\", "(?:", "^", "$",
                                               "\\uD800", "\\x{110000}", "{99999}", "\xff", "\xed\xa0\x80"};
const std::vector<std::string> kEbnfTokens = {"(", ")", "[", "]", "*", "+", "?", "|", "\"", "::=", ":", "\n",
                                              "~", "..", "\\U7FFFFFFF", "\\uDFFF", "{3,1}", "%ignore ", "->", "#"};
const std::vector<std::string> kJsonTokens = {"{", "}", "[", "]", "\"$ref\":\"#\",", "\"allOf\":[", ",", ":",
                                              "\"items\":", "\"pattern\":\"((\",", "1e400", "\"\\ud800\""};

TEST(GuidedFuzz, RegexFrontEnd) {
  run("regex", 11, iterations(400), [](Gen& g) {
    GuidedDecodingParams p;
    p.kind = GuidedKind::Regex;
    p.text = g.coin(3) ? g.mutate(regex(g), kRegexTokens) : regex(g);
    return p;
  });
}

TEST(GuidedFuzz, GbnfFrontEnd) {
  run("gbnf", 12, iterations(250), [](Gen& g) {
    GuidedDecodingParams p;
    p.kind = GuidedKind::Gbnf;
    p.text = g.coin(3) ? g.mutate(ebnf(g, false), kEbnfTokens) : ebnf(g, false);
    return p;
  });
}

TEST(GuidedFuzz, LarkFrontEnd) {
  run("lark", 13, iterations(250), [](Gen& g) {
    GuidedDecodingParams p;
    p.kind = GuidedKind::Lark;
    p.text = g.coin(3) ? g.mutate(ebnf(g, true), kEbnfTokens) : ebnf(g, true);
    return p;
  });
}

TEST(GuidedFuzz, JsonSchemaFrontEnd) {
  run("json_schema", 14, iterations(500), [](Gen& g) {
    GuidedDecodingParams p;
    p.kind = GuidedKind::JsonSchema;
    p.text = g.coin(3) ? g.mutate(schema_text(g), kJsonTokens) : schema_text(g);
    if (g.coin(8)) p.whitespace_pattern = regex(g);
    return p;
  });
}

}  // namespace
}  // namespace cypris::guided
