// Byte-level pushdown matcher (see matcher.h).
#include "engine/guided/matcher.h"

#include <algorithm>

#include "engine/common/error.h"

namespace cypris::guided {

namespace {
uint64_t key_of(int32_t pos, int32_t parent) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
}
}  // namespace

StackArena::StackArena(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  nodes_.push_back({-1, -1});  // kRoot
  nodes_.push_back({-2, -1});  // kContext
}

int32_t StackArena::intern(int32_t pos, int32_t parent) {
  auto [it, inserted] = index_.try_emplace(key_of(pos, parent), static_cast<int32_t>(nodes_.size()));
  if (inserted) {
    // A request that grows its parse stacks without bound (deep nesting) stops with an error
    // instead of taking the machine's memory.
    CYPRIS_CHECK(nodes_.size() < kMaxStackNodes, "guided decoding: the parse outgrew its limit ({} stack nodes)",
                 nodes_.size());
    nodes_.push_back({pos, parent});
  }
  return it->second;
}

void Stepper::expand(int32_t pos0, int32_t parent0, MatchState& out) {
  // Iterative: a grammar may chain thousands of rules whose first alternatives start with another
  // rule (r1 ::= r2 | "x", r2 ::= r3 | "x", ...), and recursing once per link would overflow the
  // stack. The set of tops reached does not depend on the visiting order (seen_ de-duplicates).
  work_.clear();
  work_.push_back({pos0, parent0});
  while (!work_.empty()) {
    auto [pos, parent] = work_.back();
    work_.pop_back();
    for (;;) {
      if (!seen_.insert(key_of(pos, parent)).second) break;
      const Elem& e = g_.elems[pos];
      if (e.type == Elem::Type::End) {
        if (parent == StackArena::kRoot) {
          out.can_end = true;
          break;
        }
        if (parent == StackArena::kContext) {
          out.reached_context = true;
          break;
        }
        pos = arena_.pos(parent);
        parent = arena_.parent(parent);
        continue;  // pop: carry on after the rule reference
      }
      if (e.type == Elem::Type::Bytes) {
        out.tops.push_back(arena_.intern(pos, parent));
        break;
      }
      // A reference in tail position does not push: the sub-rule returns straight to our parent.
      int32_t ret = g_.elems[pos + 1].type == Elem::Type::End ? parent : arena_.intern(pos + 1, parent);
      const auto& alts = g_.rule_alts[e.arg];
      if (alts.empty()) break;
      for (size_t i = alts.size() - 1; i-- > 0;) work_.push_back({alts[i], ret});
      pos = alts.back();
      parent = ret;
    }
  }
}

namespace {
void finish(MatchState& s) {
  std::sort(s.tops.begin(), s.tops.end());
  s.tops.erase(std::unique(s.tops.begin(), s.tops.end()), s.tops.end());
}
}  // namespace

MatchState Stepper::at(int32_t pos, int32_t parent) {
  MatchState out;
  expand(pos, parent, out);
  seen_.clear();
  finish(out);
  return out;
}

MatchState Stepper::initial() {
  MatchState out;
  for (int32_t a : g_.rule_alts[g_.root]) expand(a, StackArena::kRoot, out);
  seen_.clear();
  finish(out);
  return out;
}

MatchState Stepper::from_node(int32_t node) {
  MatchState s;
  s.tops.push_back(node);
  return s;
}

MatchState Stepper::advance(const MatchState& s, uint8_t byte) {
  MatchState out;
  for (int32_t t : s.tops) {
    int32_t p = arena_.pos(t);
    if (g_.sets[g_.elems[p].arg].test(byte)) expand(p + 1, arena_.parent(t), out);
  }
  seen_.clear();
  finish(out);
  return out;
}

bool Stepper::advance(MatchState& s, std::string_view bytes) {
  for (unsigned char c : bytes) {
    if (s.tops.empty()) return false;
    s = advance(s, c);
  }
  return !s.tops.empty() || s.can_end || bytes.empty();
}

ByteSet Stepper::next_bytes(const MatchState& s) const {
  ByteSet out;
  for (int32_t t : s.tops) out |= g_.sets[g_.elems[arena_.pos(t)].arg];
  return out;
}

}  // namespace cypris::guided
