// Token masks with a per-context cache (see token_mask.h).
#include "engine/guided/token_mask.h"

#include <algorithm>
#include <cstring>

namespace cypris::guided {

namespace {

enum class Verdict { Accepted, Rejected, Uncertain };

// Walks tokens given in sorted-bytes order from `start`, re-using the state of the common prefix
// with the previous token. follow: bytes that may come after the context bottom (nullptr = the
// stack is exact). on(token index in the list, verdict).
template <typename LcpFn, typename OnFn>
void walk(Stepper& st, const MatchState& start, const ByteSet* follow, const TokenVocab& v,
          std::span<const int32_t> sorted_idx, LcpFn lcp_with_prev, OnFn on) {
  std::vector<MatchState> states{start};
  std::vector<uint8_t> unc{0};
  size_t valid = 0;  // states[0..valid] hold the prefix of the previous token
  int dead_at = -1;
  bool dead_unc = false;
  for (size_t k = 0; k < sorted_idx.size(); ++k) {
    const std::string& b = v.bytes[v.sorted[sorted_idx[k]]];
    size_t l = k == 0 ? 0 : lcp_with_prev(k);
    if (dead_at >= 0 && l >= static_cast<size_t>(dead_at)) {
      on(k, dead_unc ? Verdict::Uncertain : Verdict::Rejected);
      continue;
    }
    dead_at = -1;
    size_t d = std::min(l, valid);
    for (; d < b.size(); ++d) {
      if (states.size() <= d + 1) {
        states.resize(d + 2);
        unc.resize(d + 2);
      }
      const MatchState& cur = states[d];
      uint8_t c = static_cast<uint8_t>(b[d]);
      bool u = unc[d] || (follow && cur.reached_context && follow->test(c));
      states[d + 1] = st.advance(cur, c);
      unc[d + 1] = u;
      valid = d + 1;
      if (states[d + 1].dead()) {
        dead_at = static_cast<int>(d + 1);
        dead_unc = u;
        break;
      }
    }
    if (dead_at >= 0) {
      on(k, dead_unc ? Verdict::Uncertain : Verdict::Rejected);
    } else {
      valid = b.size();
      on(k, Verdict::Accepted);
    }
  }
}

inline void set_bit(std::span<uint32_t> m, int32_t id) { m[id >> 5] |= 1u << (id & 31); }
inline bool get_bit(std::span<const uint32_t> m, int32_t id) { return (m[id >> 5] >> (id & 31)) & 1u; }

}  // namespace

TokenMasker::TokenMasker(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> v,
                         size_t max_cache_bytes)
    : g_(std::move(g)),
      v_(std::move(v)),
      grammar_bytes_(g_->memory_bytes()),
      max_cache_bytes_(max_cache_bytes),
      pre_arena_(g_) {}

size_t TokenMasker::entry_bytes(const std::string& key, const Entry& e) {
  // The map node and key, and the vectors' buffers.
  return 96 + key.capacity() + sizeof(Entry) + 4 * (e.bits.capacity() + e.accepted.capacity() + e.uncertain.capacity());
}

size_t TokenMasker::cached_keys() {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

std::shared_ptr<const TokenMasker::Entry> TokenMasker::compute(const std::vector<int32_t>& frames, bool exact) {
  int32_t node = exact ? StackArena::kRoot : StackArena::kContext;
  for (size_t i = frames.size(); i-- > 0;) node = pre_arena_.intern(frames[i], node);
  Stepper st(pre_arena_);
  MatchState start = st.from_node(node);
  const ByteSet* follow = exact ? nullptr : &g_->follow[g_->elem_rule[frames.back()]];
  auto e = std::make_shared<Entry>();
  std::vector<int32_t> all(v_->sorted.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  std::vector<int32_t> accepted;
  walk(st, start, follow, *v_, all, [&](size_t k) { return static_cast<size_t>(v_->lcp[k]); },
       [&](size_t k, Verdict verdict) {
         if (verdict == Verdict::Accepted) accepted.push_back(v_->sorted[k]);
         else if (verdict == Verdict::Uncertain) e->uncertain.push_back(static_cast<int32_t>(k));
       });
  // Dense bitsets cost mask_words() words; lists cost 32 bits per token.
  if (accepted.size() > mask_words()) {
    e->dense = true;
    e->bits.assign(mask_words(), 0);
    for (int32_t id : accepted) set_bit(e->bits, id);
  } else {
    std::sort(accepted.begin(), accepted.end());
    e->accepted = std::move(accepted);
  }
  return e;
}

std::shared_ptr<const TokenMasker::Entry> TokenMasker::entry_for(const StackArena& arena, int32_t top,
                                                                   std::string& key) {
  std::vector<int32_t> frames;
  int32_t n = top;
  while (n != StackArena::kRoot && static_cast<int>(frames.size()) < kContextFrames) {
    frames.push_back(arena.pos(n));
    n = arena.parent(n);
  }
  bool exact = n == StackArena::kRoot;
  key.assign(reinterpret_cast<const char*>(frames.data()), frames.size() * sizeof(int32_t));
  key += exact ? 'x' : 'c';
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const size_t nodes_before = pre_arena_.size();
  auto e = compute(frames, exact);
  // The entry, and the precomputation arena's growth (a node and its index entry, ~48 bytes).
  const size_t bytes = entry_bytes(key, *e) + 48 * (pre_arena_.size() - nodes_before);
  if (cache_bytes_.load(std::memory_order_relaxed) + bytes > max_cache_bytes_) {
    // Start over rather than grow: the contexts in use now are recomputed as they come back.
    // The precomputation arena is rebuilt too (its nodes are per context).
    cache_.clear();
    pre_arena_ = StackArena(g_);
    cache_bytes_.store(0, std::memory_order_relaxed);
    resets_.fetch_add(1, std::memory_order_relaxed);
  }
  cache_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  cache_.emplace(key, e);
  return e;
}

void TokenMasker::fill(StackArena& arena, const MatchState& s, std::span<uint32_t> mask) {
  std::fill(mask.begin(), mask.end(), 0u);
  Stepper st(arena);
  std::string key;
  std::vector<int32_t> pending;
  for (int32_t top : s.tops) {
    std::shared_ptr<const Entry> e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      e = entry_for(arena, top, key);  // kept alive here if the cache starts over meanwhile
    }
    if (e->dense) {
      for (size_t w = 0; w < mask.size(); ++w) mask[w] |= e->bits[w];
    } else {
      for (int32_t id : e->accepted) set_bit(mask, id);
    }
    if (e->uncertain.empty()) continue;
    pending.clear();
    for (int32_t k : e->uncertain)
      if (!get_bit(mask, v_->sorted[k])) pending.push_back(k);
    if (pending.empty()) continue;
    auto lcp = [&](size_t k) {
      const std::string &a = v_->bytes[v_->sorted[pending[k - 1]]], &b = v_->bytes[v_->sorted[pending[k]]];
      size_t n = 0, m = std::min(a.size(), b.size());
      while (n < m && a[n] == b[n]) ++n;
      return n;
    };
    walk(st, st.from_node(top), nullptr, *v_, pending, lcp, [&](size_t k, Verdict verdict) {
      if (verdict == Verdict::Accepted) set_bit(mask, v_->sorted[pending[k]]);
    });
  }
  if (s.can_end)
    for (int32_t id : v_->end_ids) set_bit(mask, id);
}

void TokenMasker::fill_brute_force(StackArena& arena, const MatchState& s, std::span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
  Stepper st(arena);
  for (int32_t id = 0; id < v_->size; ++id) {
    const std::string& b = v_->bytes[id];
    if (b.empty()) continue;
    MatchState cur = s;
    if (st.advance(cur, b)) set_bit(mask, id);
  }
  if (s.can_end)
    for (int32_t id : v_->end_ids) set_bit(mask, id);
}

}  // namespace cypris::guided
