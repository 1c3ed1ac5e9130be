// Grammar IR: expression constructors, UTF-8 range expansion and lowering into the flat Grammar
// (see grammar.h).
#include "engine/guided/grammar.h"

#include <algorithm>
#include <unordered_map>

#include "engine/common/error.h"

namespace cypris::guided {

namespace {

thread_local CompileBudget* g_budget = nullptr;

ExprPtr make(Expr e) {
  CompileBudget::charge(1 + e.items.size());
  for (const ExprPtr& x : e.items) e.depth = std::max(e.depth, x->depth + 1);
  return std::make_shared<const Expr>(std::move(e));
}

}  // namespace

CompileBudget::CompileBudget(std::string what, uint64_t steps) : what_(std::move(what)), limit_(steps) {
  if (g_budget) return;  // an outer compile is running: share its budget
  g_budget = this;
  owner_ = true;
}

CompileBudget::~CompileBudget() {
  if (owner_) g_budget = nullptr;
}

void CompileBudget::charge(uint64_t steps) {
  CompileBudget* b = g_budget;
  if (!b) return;
  b->used_ += steps;
  if (b->used_ <= b->limit_) return;
  b->used_ = 0;  // the error ends this compile; a caller that catches it may go on
  CYPRIS_FAIL("{}: compiling this grammar takes more than {} steps (the limit); make it smaller (fewer properties, "
              "alternatives, repetitions or allOf merges)",
              b->what_, b->limit_);
}

uint64_t CompileBudget::used() { return g_budget ? g_budget->used_ : 0; }

ExprPtr flat(ExprPtr x) {
  if (x->depth == 1) return x;
  Expr e = *x;
  e.depth = 1;
  return std::make_shared<const Expr>(std::move(e));
}

ExprPtr empty() { return make(Expr{}); }

ExprPtr bytes(const ByteSet& set) {
  Expr e;
  e.kind = Expr::Kind::Bytes;
  e.bytes = set;
  return make(std::move(e));
}

ExprPtr byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return bytes(s);
}

ExprPtr literal(std::string_view text) {
  std::vector<ExprPtr> items;
  items.reserve(text.size());
  for (unsigned char c : text) items.push_back(byte(c));
  return flat(seq(std::move(items)));
}

ExprPtr seq(std::vector<ExprPtr> items) {
  if (items.size() == 1) return items[0];
  Expr e;
  e.kind = items.empty() ? Expr::Kind::Empty : Expr::Kind::Seq;
  e.items = std::move(items);
  return make(std::move(e));
}

ExprPtr alt(std::vector<ExprPtr> items) {
  if (items.size() == 1) return items[0];
  Expr e;
  e.kind = Expr::Kind::Alt;
  e.items = std::move(items);
  return make(std::move(e));
}

ExprPtr repeat(ExprPtr x, int min, int max) {
  Expr e;
  e.kind = Expr::Kind::Repeat;
  e.items = {std::move(x)};
  e.min = min;
  e.max = max;
  return make(std::move(e));
}

ExprPtr ref(int rule) {
  Expr e;
  e.kind = Expr::Kind::Ref;
  e.rule = rule;
  return make(std::move(e));
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

size_t decode_utf8(std::string_view text, size_t i, uint32_t& cp) {
  if (i >= text.size()) return 0;
  const auto c = static_cast<unsigned char>(text[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(text[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

CodepointRanges normalize_ranges(CodepointRanges r) {
  CodepointRanges cut;
  for (auto [lo, hi] : r) {
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo > hi) continue;
    // Surrogates are not scalar values: UTF-8 cannot carry them.
    if (lo < 0xD800 && hi >= 0xD800) {
      cut.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else {
      cut.push_back({lo, hi});
    }
  }
  std::sort(cut.begin(), cut.end());
  CodepointRanges out;
  for (auto [lo, hi] : cut) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.push_back({lo, hi});
    }
  }
  return out;
}

CodepointRanges complement_ranges(const CodepointRanges& r) {
  CodepointRanges n = normalize_ranges(r), out;
  uint32_t next = 0;
  for (auto [lo, hi] : n) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return normalize_ranges(out);
}

namespace {

int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] (same encoded length) into ranges whose encodings are products of byte ranges:
// every byte position then ranges independently (the classic UTF-8 range-to-automaton split).
void utf8_split(uint32_t lo, uint32_t hi, std::vector<ExprPtr>& out) {
  int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(lo, lo | m, out);
        utf8_split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_split(lo, (hi & ~m) - 1, out);
        utf8_split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a = utf8_encode(lo), b = utf8_encode(hi);
  std::vector<ExprPtr> parts;
  for (size_t k = 0; k < a.size(); ++k) {
    ByteSet s;
    for (unsigned v = static_cast<unsigned char>(a[k]); v <= static_cast<unsigned char>(b[k]); ++v) s.set(v);
    parts.push_back(bytes(s));
  }
  out.push_back(seq(std::move(parts)));
}

}  // namespace

ExprPtr codepoints(const CodepointRanges& ranges) {
  std::vector<ExprPtr> alts;
  ByteSet ascii;
  for (auto [lo, hi] : normalize_ranges(ranges)) {
    // Split at the encoded-length boundaries first.
    const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    uint32_t start = lo;
    for (uint32_t b : bounds) {
      if (start > hi) break;
      if (start > b) continue;
      uint32_t end = std::min(hi, b);
      if (end < 0x80) {
        for (uint32_t c = start; c <= end; ++c) ascii.set(c);
      } else {
        utf8_split(start, end, alts);
      }
      start = end + 1;
    }
  }
  if (ascii.any()) alts.insert(alts.begin(), bytes(ascii));
  if (alts.empty()) return bytes(ByteSet{});  // matches nothing
  return flat(alt(std::move(alts)));
}

ExprPtr any_char() { return codepoints({{0, 0x10FFFF}}); }

int GrammarBuilder::rule(const std::string& name) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  int id = static_cast<int>(names_.size());
  names_.push_back(name);
  bodies_.push_back(nullptr);
  by_name_[name] = id;
  return id;
}

int GrammarBuilder::new_rule(const std::string& hint) {
  // The next suffix per hint: a schema with n properties asks for the same hint n times, and
  // probing "-1", "-2", ... from the start each time would cost n^2 lookups.
  int& k = next_suffix_[hint];
  std::string name = k == 0 ? hint : hint + "-" + std::to_string(k);
  while (by_name_.count(name)) name = hint + "-" + std::to_string(++k);
  ++k;
  return rule(name);
}

void GrammarBuilder::define(int rule, ExprPtr body) { bodies_.at(rule) = std::move(body); }

namespace {

class Lowerer {
 public:
  Lowerer(const std::vector<std::string>& names, const std::vector<ExprPtr>& bodies, const std::string& what)
      : names_(names), bodies_(bodies), what_(what) {
    alts_.resize(names.size());
    g_.rule_names = names;
  }

  Grammar run(int root) {
    for (size_t r = 0; r < bodies_.size(); ++r) {
      if (!bodies_[r]) continue;
      // The front ends bound nesting as they parse; this guards lowering's recursion whatever
      // built the rule (literals and classes count one level but hold a few).
      CYPRIS_CHECK(bodies_[r]->depth <= 2 * kMaxNestingDepth + 8,
                   "{}: rule '{}' is nested more than {} levels deep (the limit)", what_, names_[r], kMaxNestingDepth);
      alts_[r] = alts_of(bodies_[r], names_[r]);
    }
    for (size_t r = 0; r < referenced_.size(); ++r) {
      if (referenced_[r] && r < bodies_.size() && !bodies_[r])
        CYPRIS_FAIL("{}: rule '{}' is used but never defined", what_, names_[r]);
    }
    CYPRIS_CHECK(root >= 0 && root < static_cast<int>(bodies_.size()) && bodies_[root], "{}: no root rule '{}'",
                 what_, root >= 0 && root < static_cast<int>(names_.size()) ? names_[root] : std::string("?"));
    g_.root = root;
    // Flatten.
    g_.rule_alts.resize(alts_.size());
    for (size_t r = 0; r < alts_.size(); ++r) {
      for (auto& a : alts_[r]) {
        g_.rule_alts[r].push_back(static_cast<int32_t>(g_.elems.size()));
        for (const Elem& e : a) {
          g_.elems.push_back(e);
          g_.elem_rule.push_back(static_cast<int32_t>(r));
        }
        g_.elems.push_back({Elem::Type::End, 0});
        g_.elem_rule.push_back(static_cast<int32_t>(r));
      }
    }
    CYPRIS_CHECK(g_.elems.size() <= kMaxGrammarElems, "{}: the grammar is too large ({} elements; at most {})", what_,
                 g_.elems.size(), kMaxGrammarElems);
    prune_unproductive();
    analyse();
    return std::move(g_);
  }

 private:
  using Alts = std::vector<std::vector<Elem>>;

  int add_anon(const std::string& hint) {
    int id = static_cast<int>(alts_.size());
    alts_.emplace_back();
    g_.rule_names.push_back(hint + "#" + std::to_string(id));
    return id;
  }

  int32_t set_index(const ByteSet& s) {
    auto [it, inserted] = set_ids_.try_emplace(s, static_cast<int32_t>(g_.sets.size()));
    if (inserted) g_.sets.push_back(s);
    return it->second;
  }

  void count(size_t n) {
    CompileBudget::charge(n);
    total_ += n;
    CYPRIS_CHECK(total_ <= kMaxGrammarElems, "{}: the grammar is too large (more than {} elements)", what_,
                 kMaxGrammarElems);
  }

  Alts alts_of(const ExprPtr& e, const std::string& hint) {
    Alts out;
    if (e->kind == Expr::Kind::Alt) {
      for (auto& item : e->items) {
        count(1);  // its End
        out.emplace_back();
        emit(item, out.back(), hint);
      }
    } else {
      count(1);
      out.emplace_back();
      emit(e, out.back(), hint);
    }
    return out;
  }

  void emit(const ExprPtr& e, std::vector<Elem>& out, const std::string& hint) {
    switch (e->kind) {
      case Expr::Kind::Empty:
        return;
      case Expr::Kind::Bytes:
        count(1);
        out.push_back({Elem::Type::Bytes, set_index(e->bytes)});
        return;
      case Expr::Kind::Seq:
        for (auto& item : e->items) emit(item, out, hint);
        return;
      case Expr::Kind::Ref:
        if (referenced_.size() <= static_cast<size_t>(e->rule)) referenced_.resize(e->rule + 1, 0);
        referenced_[e->rule] = 1;
        count(1);
        out.push_back({Elem::Type::Ref, e->rule});
        return;
      case Expr::Kind::Alt: {
        auto it = alt_rules_.find(e.get());
        int r;
        if (it != alt_rules_.end()) {
          r = it->second;
        } else {
          r = add_anon(hint);
          alt_rules_[e.get()] = r;
          Alts a = alts_of(e, hint);
          alts_[r] = std::move(a);
        }
        count(1);
        out.push_back({Elem::Type::Ref, r});
        return;
      }
      case Expr::Kind::Repeat: {
        const ExprPtr& x = e->items[0];
        CYPRIS_CHECK(e->min >= 0 && e->min <= kMaxRepeatBound && e->max <= kMaxRepeatBound &&
                         (e->max < 0 || e->max >= e->min),
                     "{}: repetition {{{},{}}} is out of range (bounds must be ordered and at most {})", what_, e->min,
                     e->max, kMaxRepeatBound);
        for (int i = 0; i < e->min; ++i) emit(x, out, hint);
        if (e->max < 0) {
          count(1);
          out.push_back({Elem::Type::Ref, star_rule(x, hint)});
        } else if (e->max > e->min) {
          count(1);
          out.push_back({Elem::Type::Ref, opt_chain(x, e->max - e->min, hint)});
        }
        return;
      }
    }
  }

  // R ::= X R | empty
  int star_rule(const ExprPtr& x, const std::string& hint) {
    auto key = std::make_pair(x.get(), -1);
    auto it = rep_rules_.find(key);
    if (it != rep_rules_.end()) return it->second;
    int r = add_anon(hint + "-star");
    rep_rules_[key] = r;
    std::vector<Elem> body;
    emit(x, body, hint);
    body.push_back({Elem::Type::Ref, r});
    count(2);  // the two Ends
    alts_[r] = {std::move(body), {}};
    return r;
  }

  // O_k ::= X O_{k-1} | empty, O_1 ::= X | empty: up to k more copies of X.
  int opt_chain(const ExprPtr& x, int k, const std::string& hint) {
    int prev = -1;
    for (int j = 1; j <= k; ++j) {
      auto key = std::make_pair(x.get(), j);
      auto it = rep_rules_.find(key);
      if (it != rep_rules_.end()) {
        prev = it->second;
        continue;
      }
      int r = add_anon(hint + "-opt");
      rep_rules_[key] = r;
      std::vector<Elem> body;
      emit(x, body, hint);
      if (prev >= 0) body.push_back({Elem::Type::Ref, prev});
      count(2);
      alts_[r] = {std::move(body), {}};
      prev = r;
    }
    return prev;
  }

  // A rule is productive when some alternative can be completed: every element is a non-empty
  // byte set or a productive rule. Alternatives that cannot be completed are dropped, so every
  // state the matcher reaches can still end well (a model is never led into a dead end), and a
  // root that cannot be completed means no text satisfies the grammar: refused, not silently
  // answered with free text. Worklist over the references, linear in the grammar.
  void prune_unproductive() {
    const size_t n = g_.rule_alts.size();
    std::vector<int32_t> missing;         // per alternative (in order): elements not yet known productive
    std::vector<int32_t> alt_rule;        // per alternative: its rule
    std::vector<std::vector<int32_t>> waiting(n);  // per rule: the alternatives that refer to it
    std::vector<uint8_t> productive(n, 0);
    std::vector<int32_t> work;
    for (size_t r = 0; r < n; ++r) {
      for (int32_t a : g_.rule_alts[r]) {
        const int32_t id = static_cast<int32_t>(missing.size());
        int32_t m = 0;
        bool dead = false;
        for (int32_t pos = a; g_.elems[pos].type != Elem::Type::End; ++pos) {
          const Elem& e = g_.elems[pos];
          if (e.type == Elem::Type::Bytes) {
            dead = dead || g_.sets[e.arg].none();
          } else {
            ++m;
            waiting[e.arg].push_back(id);
          }
        }
        missing.push_back(dead ? -1 : m);
        alt_rule.push_back(static_cast<int32_t>(r));
        if (m == 0 && !dead && !productive[r]) {
          productive[r] = 1;
          work.push_back(static_cast<int32_t>(r));
        }
      }
    }
    while (!work.empty()) {
      const int32_t b = work.back();
      work.pop_back();
      for (int32_t id : waiting[b]) {
        if (missing[id] <= 0) continue;  // dead, or already complete
        if (--missing[id] == 0 && !productive[alt_rule[id]]) {
          productive[alt_rule[id]] = 1;
          work.push_back(alt_rule[id]);
        }
      }
    }
    if (!productive[g_.root]) {
      CYPRIS_FAIL("{}: no text can satisfy it: it can never be completed (an empty character class such as "
                  "[^\\s\\S], or rules / $ref that only refer to themselves)",
                  what_);
    }
    size_t id = 0;
    for (size_t r = 0; r < n; ++r) {
      std::vector<int32_t> kept;
      for (int32_t a : g_.rule_alts[r]) {
        if (missing[id++] == 0) kept.push_back(a);
      }
      g_.rule_alts[r] = std::move(kept);
    }
  }

  void analyse() {
    size_t n = g_.rule_alts.size();
    g_.nullable.assign(n, 0);
    std::vector<ByteSet> first(n);
    g_.follow.assign(n, ByteSet{});
    auto prefix = [&](int32_t pos, ByteSet& f) -> bool {  // FIRST of elems from pos; returns nullable
      for (;; ++pos) {
        const Elem& e = g_.elems[pos];
        if (e.type == Elem::Type::End) return true;
        if (e.type == Elem::Type::Bytes) {
          f |= g_.sets[e.arg];
          return false;
        }
        f |= first[e.arg];
        if (!g_.nullable[e.arg]) return false;
      }
    };
    // FIRST and nullability by a worklist: a rule is re-evaluated only when a rule it refers to
    // changed, and each rule changes at most 257 times (a byte more, or nullable), so a chain of
    // rules n long costs O(n), not the n passes of a plain fixpoint loop (O(n^2)).
    std::vector<std::vector<int32_t>> users(n);  // users[b]: the rules that refer to b
    for (size_t r = 0; r < n; ++r)
      for (int32_t a : g_.rule_alts[r])
        for (int32_t pos = a; g_.elems[pos].type != Elem::Type::End; ++pos)
          if (g_.elems[pos].type == Elem::Type::Ref) users[g_.elems[pos].arg].push_back(static_cast<int32_t>(r));
    for (auto& u : users) {
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
    }
    std::vector<int32_t> work(n);
    std::vector<uint8_t> queued(n, 1);
    for (size_t r = 0; r < n; ++r) work[r] = static_cast<int32_t>(n - 1 - r);
    while (!work.empty()) {
      const int32_t r = work.back();
      work.pop_back();
      queued[r] = 0;
      CompileBudget::charge(1 + g_.rule_alts[r].size());
      ByteSet f = first[r];
      bool nul = g_.nullable[r];
      for (int32_t a : g_.rule_alts[r]) nul = prefix(a, f) || nul;
      if (f == first[r] && nul == static_cast<bool>(g_.nullable[r])) continue;
      first[r] = f;
      g_.nullable[r] = nul;
      for (int32_t u : users[r])
        if (!queued[u]) {
          queued[u] = 1;
          work.push_back(u);
        }
    }
    // Left recursion: A -> B when B can be reached in A without consuming a byte. A cycle of such
    // edges is harmless when every reference on it is a tail call (the matcher's stack does not
    // grow and its de-duplication ends the expansion: "(a*)*"); a cycle through a non-tail
    // reference would push forever, so it is refused. Kosaraju's SCCs, iteratively (chains of
    // rules can be thousands deep).
    std::vector<std::vector<std::pair<int32_t, bool>>> left(n);  // (target, tail call)
    std::vector<std::vector<int32_t>> back(n);
    for (size_t r = 0; r < n; ++r) {
      for (int32_t a : g_.rule_alts[r]) {
        for (int32_t pos = a; g_.elems[pos].type == Elem::Type::Ref; ++pos) {
          int32_t b = g_.elems[pos].arg;
          left[r].push_back({b, g_.elems[pos + 1].type == Elem::Type::End});
          back[b].push_back(static_cast<int32_t>(r));
          if (!g_.nullable[b]) break;
        }
      }
    }
    std::vector<int32_t> order;
    std::vector<uint8_t> seen(n, 0);
    for (size_t s0 = 0; s0 < n; ++s0) {
      if (seen[s0]) continue;
      std::vector<std::pair<int32_t, size_t>> stack{{static_cast<int32_t>(s0), 0}};
      seen[s0] = 1;
      while (!stack.empty()) {
        auto& [v, i] = stack.back();
        if (i < left[v].size()) {
          int32_t w = left[v][i++].first;
          if (!seen[w]) {
            seen[w] = 1;
            stack.push_back({w, 0});
          }
        } else {
          order.push_back(v);
          stack.pop_back();
        }
      }
    }
    std::vector<int32_t> comp(n, -1);
    int32_t nc = 0;
    for (size_t k = order.size(); k-- > 0;) {
      int32_t s0 = order[k];
      if (comp[s0] >= 0) continue;
      std::vector<int32_t> stack{s0};
      comp[s0] = nc;
      while (!stack.empty()) {
        int32_t v = stack.back();
        stack.pop_back();
        for (int32_t w : back[v])
          if (comp[w] < 0) {
            comp[w] = nc;
            stack.push_back(w);
          }
      }
      ++nc;
    }
    for (size_t r = 0; r < n; ++r) {
      for (auto [b, tail] : left[r]) {
        if (!tail && comp[b] == comp[r]) {
          CYPRIS_FAIL("{}: rule '{}' is left-recursive (it can reach itself without consuming input); rewrite it "
                      "with repetition, e.g. a ::= b (\"+\" b)*",
                      what_, display_name(static_cast<int32_t>(r)));
        }
      }
    }
    // FOLLOW: a reference's fixed part (FIRST of what comes after it in its alternative) once,
    // then follow[r] flows to every reference with a nullable rest in r's alternatives, by a
    // worklist (each set grows at most 256 times).
    std::vector<std::vector<int32_t>> flows(n);  // flows[r]: the rules whose FOLLOW includes FOLLOW(r)
    for (size_t r = 0; r < n; ++r) {
      for (int32_t a : g_.rule_alts[r]) {
        for (int32_t pos = a; g_.elems[pos].type != Elem::Type::End; ++pos) {
          if (g_.elems[pos].type != Elem::Type::Ref) continue;
          const int32_t b = g_.elems[pos].arg;
          if (prefix(pos + 1, g_.follow[b])) flows[r].push_back(b);
        }
      }
    }
    for (size_t r = 0; r < n; ++r) {
      work.push_back(static_cast<int32_t>(r));
      queued[r] = 1;
    }
    while (!work.empty()) {
      const int32_t r = work.back();
      work.pop_back();
      queued[r] = 0;
      CompileBudget::charge(1 + flows[r].size());
      for (int32_t b : flows[r]) {
        const ByteSet f = g_.follow[b] | g_.follow[r];
        if (f == g_.follow[b]) continue;
        g_.follow[b] = f;
        if (!queued[b]) {
          queued[b] = 1;
          work.push_back(b);
        }
      }
    }
  }

  std::string display_name(int32_t r) const {
    const std::string& s = g_.rule_names[r];
    auto hash = s.find('#');
    return hash == std::string::npos ? s : s.substr(0, hash);
  }

  const std::vector<std::string>& names_;
  const std::vector<ExprPtr>& bodies_;
  std::string what_;
  Grammar g_;
  std::vector<Alts> alts_;
  std::vector<uint8_t> referenced_;
  std::unordered_map<const Expr*, int> alt_rules_;
  std::map<std::pair<const Expr*, int>, int> rep_rules_;
  std::unordered_map<ByteSet, int32_t> set_ids_;
  size_t total_ = 0;
};

std::string set_text(const ByteSet& s) {
  if (s.count() == 1) {
    for (int b = 0; b < 256; ++b)
      if (s.test(b)) return b >= 0x20 && b < 0x7F ? fmt::format("'{}'", static_cast<char>(b)) : fmt::format("x{:02X}", b);
  }
  std::string out = "[";
  for (int b = 0; b < 256; ++b) {
    if (!s.test(b)) continue;
    int e = b;
    while (e + 1 < 256 && s.test(e + 1)) ++e;
    auto one = [](int c) {
      return c >= 0x21 && c < 0x7F && c != ']' && c != '-' ? std::string(1, static_cast<char>(c))
                                                            : fmt::format("x{:02X}", c);
    };
    out += one(b);
    if (e > b) {
      out += '-';
      out += one(e);
    }
    b = e;
  }
  return out + "]";
}

}  // namespace

Grammar GrammarBuilder::build(int root, const std::string& what) const {
  CompileBudget budget(what);
  return Lowerer(names_, bodies_, what).run(root);
}

size_t Grammar::memory_bytes() const {
  size_t b = sizeof(Grammar) + elems.capacity() * sizeof(Elem) + sets.capacity() * sizeof(ByteSet) +
             elem_rule.capacity() * sizeof(int32_t) + follow.capacity() * sizeof(ByteSet) + nullable.capacity();
  for (const auto& a : rule_alts) b += sizeof(a) + a.capacity() * sizeof(int32_t);
  for (const auto& n : rule_names) b += sizeof(n) + n.capacity();
  return b;
}

std::string Grammar::dump() const {
  std::string out;
  for (size_t r = 0; r < rule_alts.size(); ++r) {
    if (rule_alts[r].empty()) continue;
    out += rule_names[r] + " ::=";
    for (size_t i = 0; i < rule_alts[r].size(); ++i) {
      if (i) out += " |";
      for (int32_t pos = rule_alts[r][i]; elems[pos].type != Elem::Type::End; ++pos) {
        out += " ";
        out += elems[pos].type == Elem::Type::Ref ? rule_names[elems[pos].arg] : set_text(sets[elems[pos].arg]);
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace cypris::guided
