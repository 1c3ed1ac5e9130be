// The byte-level pushdown matcher of guided decoding. A parse position is a stack of grammar
// positions; stacks are interned nodes (position, parent) in a StackArena, so stacks share their
// bottoms, a state is just the sorted list of its top nodes, and copying a state (n > 1, beam forks)
// copies a few integers. Each top node points at a byte-set element; advancing by a byte keeps the
// tops whose set holds it and expands what follows (pushing rule alternatives, popping finished
// rules). Tail calls do not push, so repetition keeps stacks flat.
//
// Matcher adds the per-token history used to roll back (banned-string rewinds, preemption) and the
// token-level operations the sampler needs.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/guided/grammar.h"

namespace cypris::guided {

// The stack nodes one matcher (a request's sequence and its copies) may intern: about 100 MB with
// the index. A parse that needs more (output nested without end) stops with an error.
inline constexpr size_t kMaxStackNodes = size_t{1} << 21;

class StackArena {
 public:
  static constexpr int32_t kRoot = 0;     // below the root rule: reaching it means the input may end
  static constexpr int32_t kContext = 1;  // "whatever the real stack is" (token-mask precomputation)

  explicit StackArena(std::shared_ptr<const Grammar> g);
  const Grammar& grammar() const { return *g_; }
  int32_t intern(int32_t pos, int32_t parent);
  int32_t pos(int32_t node) const { return nodes_[node].pos; }
  int32_t parent(int32_t node) const { return nodes_[node].parent; }
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    int32_t pos;
    int32_t parent;
  };
  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
};

struct MatchState {
  std::vector<int32_t> tops;  // sorted top nodes; each at a Bytes element
  bool can_end = false;       // some parse has finished the root rule
  bool reached_context = false;  // some parse popped into StackArena::kContext (precomputation only)
  bool dead() const { return tops.empty() && !can_end && !reached_context; }
};

// Stateless operations on states (the arena is shared and grows).
class Stepper {
 public:
  explicit Stepper(StackArena& arena) : arena_(arena), g_(arena.grammar()) {}
  // The state at the start: the root rule expanded.
  MatchState initial();
  // The state of a single stack node (its top must be a Bytes element) — used by the token mask.
  MatchState from_node(int32_t node);
  // Expands continuing at `pos` with `parent` below it.
  MatchState at(int32_t pos, int32_t parent);
  MatchState advance(const MatchState& s, uint8_t byte);
  // True when every byte is accepted; `s` becomes the state after them.
  bool advance(MatchState& s, std::string_view bytes);
  // Bytes some top accepts next.
  ByteSet next_bytes(const MatchState& s) const;

 private:
  void expand(int32_t pos, int32_t parent, MatchState& out);
  StackArena& arena_;
  const Grammar& g_;
  std::unordered_set<uint64_t> seen_;
  std::vector<std::pair<int32_t, int32_t>> work_;  // expand's pending (position, parent) pairs
};

}  // namespace cypris::guided
