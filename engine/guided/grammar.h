// The grammar IR of guided decoding: every front end (JSON Schema, regex, choice, GBNF, Lark EBNF)
// builds an expression tree over BYTES with a GrammarBuilder, which lowers it into a flat Grammar:
// rules of alternatives, each alternative a run of elements (a byte set, a rule reference) closed by
// End. Unicode character classes are expanded into UTF-8 byte sequences here, so the matcher and the
// token mask only ever see bytes (tokens may end in the middle of a character).
//
// Repetition becomes right recursion (R ::= X R | empty), bounded repetition a chain of optional
// rules, so the matcher's tail calls keep stacks flat. Left recursion is refused at build time (the
// matcher is a pushdown automaton that expands rules eagerly), naming the rule.
#pragma once

#include <bitset>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cypris::guided {

using ByteSet = std::bitset<256>;

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind { Empty, Bytes, Seq, Alt, Repeat, Ref };
  Kind kind = Kind::Empty;
  ByteSet bytes;               // Bytes: one byte from this set
  std::vector<ExprPtr> items;  // Seq, Alt; Repeat: items[0]
  int min = 0, max = -1;       // Repeat; max -1 = unbounded
  int rule = -1;               // Ref
  // Nesting levels of groups and quantifiers: 1 for a leaf, a literal or a character class (their
  // few internal levels are bounded), 1 + the deepest item otherwise. Lowering and destruction
  // recurse over the tree, so the front ends keep it at most kMaxNestingDepth.
  int depth = 1;
};

// Expression constructors.
ExprPtr empty();
ExprPtr bytes(const ByteSet& set);
ExprPtr byte(uint8_t b);
ExprPtr literal(std::string_view text);  // the bytes of text, in order
ExprPtr seq(std::vector<ExprPtr> items);
ExprPtr alt(std::vector<ExprPtr> items);
ExprPtr repeat(ExprPtr x, int min, int max);  // max -1: unbounded
inline ExprPtr star(ExprPtr x) { return repeat(std::move(x), 0, -1); }
inline ExprPtr plus(ExprPtr x) { return repeat(std::move(x), 1, -1); }
inline ExprPtr opt(ExprPtr x) { return repeat(std::move(x), 0, 1); }
ExprPtr ref(int rule);
// The same expression counted as one nesting level: for literals and character classes, whose
// few internal levels are bounded and not the user's nesting.
ExprPtr flat(ExprPtr x);

// Code point ranges [lo, hi] (inclusive) of a character class; surrogates are never produced.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;
CodepointRanges normalize_ranges(CodepointRanges r);  // sorted, merged, surrogates removed
CodepointRanges complement_ranges(const CodepointRanges& r);  // within [0, 0x10FFFF]
// One code point from the ranges, as its UTF-8 bytes.
ExprPtr codepoints(const CodepointRanges& ranges);
// Any code point (valid UTF-8 scalar value).
ExprPtr any_char();
// UTF-8 encoding of one code point.
std::string utf8_encode(uint32_t cp);
// Decodes the code point at text[i]: its length in bytes, or 0 when the bytes there are not
// well-formed UTF-8 (truncated, overlong, a surrogate, past U+10FFFF, a stray continuation byte).
size_t decode_utf8(std::string_view text, size_t i, uint32_t& cp);

struct Elem {
  enum class Type : uint8_t { Bytes, Ref, End };
  Type type;
  int32_t arg;  // Bytes: index into Grammar::sets; Ref: rule id
};

struct Grammar {
  std::vector<Elem> elems;
  std::vector<ByteSet> sets;
  std::vector<std::vector<int32_t>> rule_alts;  // per rule: start index of each alternative in elems
  std::vector<std::string> rule_names;
  std::vector<int32_t> elem_rule;  // per elem: the rule whose alternative holds it
  std::vector<ByteSet> follow;     // per rule: bytes that may come right after the rule ends
  std::vector<uint8_t> nullable;   // per rule
  int32_t root = 0;

  size_t num_rules() const { return rule_alts.size(); }
  size_t memory_bytes() const;  // what the grammar holds (the caches count it)
  std::string dump() const;  // readable listing, for tests and debugging
};

class GrammarBuilder {
 public:
  // Declares a rule (or returns the one of that name). Names are for error messages and dumps.
  int rule(const std::string& name);
  // A fresh rule with a unique name derived from `hint`.
  int new_rule(const std::string& hint);
  bool has_rule(const std::string& name) const { return by_name_.count(name) != 0; }
  void define(int rule, ExprPtr body);
  bool defined(int rule) const { return bodies_[rule] != nullptr; }
  const std::string& name(int rule) const { return names_[rule]; }

  // Lowers the rules reachable from root. `what` prefixes error messages ("guided_grammar").
  // Fails on undefined rules (naming them), left recursion (naming the rule) and size limits.
  Grammar build(int root, const std::string& what) const;

 private:
  std::vector<std::string> names_;
  std::vector<ExprPtr> bodies_;
  std::map<std::string, int> by_name_;
  std::map<std::string, int> next_suffix_;  // new_rule: the next suffix to try per hint
};

// Size limits that keep a request from building an unbounded grammar.
inline constexpr size_t kMaxGrammarElems = 2'000'000;
inline constexpr int kMaxRepeatBound = 10'000;
// The one nesting limit of every front end: groups, brackets and stacked quantifiers of a regex,
// GBNF or Lark grammar; schemas inside schemas (properties, items, anyOf, $ref chains) of a JSON
// Schema. Their parsers and compilers recurse once per level; deeper input is a named error.
inline constexpr int kMaxNestingDepth = 256;
// Sizes checked before anything is built.
inline constexpr size_t kMaxPatternBytes = 64 * 1024;        // one regex (guided_regex, pattern, ...)
inline constexpr size_t kMaxGrammarTextBytes = 256 * 1024;   // a GBNF or Lark grammar
inline constexpr size_t kMaxSchemaNodes = 100'000;           // JSON values in a schema
inline constexpr size_t kMaxChoices = 16'384;                // guided_choice entries
inline constexpr size_t kMaxChoiceBytes = 256 * 1024;        // guided_choice, all entries together
// The work one compilation may do: expressions built, elements lowered, analysis steps, schema
// values visited and copied. A grammar within the size limits can still be expensive (a large
// repetition of a large group, allOf merging big definitions many times); past the budget the
// compile stops with a named error instead of holding a server thread.
// About 2 s of one core on the 2-core CI machine for the heaviest kinds (a 10,000-property
// schema takes ~2.9M steps, 1.8 s); compile() also runs at most kMaxConcurrentCompiles at once.
inline constexpr uint64_t kMaxCompileSteps = 4'000'000;

// The budget of the compile running on this thread. The outermost CompileBudget opens it (the
// front-end entry points and compile() each make one; inner ones share the outer), charge() spends
// it and throws cypris::Error naming `what` and the limit when it runs out.
class CompileBudget {
 public:
  explicit CompileBudget(std::string what, uint64_t steps = kMaxCompileSteps);
  ~CompileBudget();
  CompileBudget(const CompileBudget&) = delete;
  CompileBudget& operator=(const CompileBudget&) = delete;
  static void charge(uint64_t steps = 1);
  static uint64_t used();  // steps spent by the open budget (0 when none is open)

 private:
  std::string what_;
  uint64_t limit_ = 0, used_ = 0;
  bool owner_ = false;
};

}  // namespace cypris::guided
