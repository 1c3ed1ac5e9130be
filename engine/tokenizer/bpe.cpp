// BPE model. See bpe.h.
#include "engine/tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <queue>

#include "engine/common/error.h"
#include "engine/tokenizer/unicode.h"

namespace cypris {

// Open addressing over (left id, right id) -> (rank, merged id); far faster than std::unordered_map
// for the few million probes a megabyte of text needs.
struct BpeModel::MergeTable {
  struct Slot {
    uint64_t key = ~uint64_t(0);
    int32_t rank = 0;
    int32_t id = 0;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  void put(uint64_t key, int32_t rank, int32_t id) {
    for (uint64_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key || slots[i].key == ~uint64_t(0)) {
        slots[i] = {key, rank, id};
        return;
      }
    }
  }
  const Slot* get(uint64_t key) const {
    for (uint64_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == ~uint64_t(0)) return nullptr;
    }
  }
};

// Bounded word cache, sharded so that threads encoding at once rarely wait on each other. A full
// shard is simply cleared: cheap, and the hot words come back at once.
struct BpeModel::Cache {
  static constexpr size_t kShards = 32;
  static constexpr size_t kShardCapacity = 4096;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  Shard shards[kShards];
};

static uint64_t token_hash(std::string_view s) {
  return std::hash<std::string_view>{}(s) | 1;
}

int32_t BpeModel::find_token(std::string_view token) const {
  uint64_t h = token_hash(token);
  for (uint64_t i = h & token_mask_;; i = (i + 1) & token_mask_) {
    const TokenSlot& s = token_slots_[i];
    if (s.hash == 0) return -1;
    if (s.hash == h && id_to_token_[s.id] == token) return s.id;
  }
}

static uint64_t pair_key(int32_t a, int32_t b) {
  return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}

BpeModel::BpeModel(VocabList vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opts,
                   const std::string& where)
    : opts_(std::move(opts)) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab) {
    CYPRIS_CHECK(id >= 0 && id < (1 << 28), "{}: BPE vocabulary id {} of token '{}' is out of range", where, id, tok);
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(size_t(max_id + 1));
  id_present_.assign(size_t(max_id + 1), 0);
  size_t cap = 16;
  while (cap < vocab.size() * 2) cap <<= 1;
  token_slots_.assign(cap, TokenSlot{});
  token_mask_ = cap - 1;
  bmp_char_id_.assign(0x10000, -1);
  bool metaspace_inside = false;
  for (auto& [tok, id] : vocab) {
    if (id_present_[id]) continue;  // two tokens with one id: the first is kept
    size_t i = 0;
    uint32_t cp = tok.empty() ? 0 : unicode::next_cp(tok, i);
    if (!tok.empty() && i == tok.size() && cp < 0x10000) bmp_char_id_[cp] = id;
    // "▁" (E2 96 81) after some other character?
    for (size_t p = tok.find("\xE2\x96\x81", 1); p != std::string::npos; p = tok.find("\xE2\x96\x81", p + 3)) {
      if (p < 3 || tok.compare(p - 3, 3, "\xE2\x96\x81") != 0) metaspace_inside = true;
    }
    uint64_t h = token_hash(tok);
    uint64_t slot = h & token_mask_;
    while (token_slots_[slot].hash != 0) slot = (slot + 1) & token_mask_;
    token_slots_[slot] = {h, id};
    id_to_token_[id] = std::move(tok);
    id_present_[id] = 1;
  }
  vocab.clear();
  if (opts_.unk_token) {
    // Like Hugging Face, an unk token missing from the vocabulary only matters when it is needed.
    int32_t id = find_token(*opts_.unk_token);
    if (id >= 0) unk_id_ = id;
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = find_token(fmt::format("<0x{:02X}>", b));
  split_at_metaspace_ = !metaspace_inside && find_token("\xE2\x96\x81") >= 0 &&
                        opts_.continuing_subword_prefix.empty() && opts_.end_of_word_suffix.empty();

  merges_ = std::make_unique<MergeTable>(merges.size());
  const std::string& prefix = opts_.continuing_subword_prefix;
  auto merged_of = [&](const std::string& a, const std::string& b) {
    std::string m = a;
    m += (!prefix.empty() && b.compare(0, prefix.size(), prefix) == 0) ? b.substr(prefix.size()) : b;
    return m;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::string a = merges[rank].first, b = merges[rank].second;
    if (b.empty()) {
      // A whole "a b" line whose tokens may themselves contain spaces (some SentencePiece
      // conversions have "   " = " " + " "): the split is the space where both halves and their
      // concatenation are in the vocabulary.
      const std::string line = a;
      a.clear();
      for (size_t p = line.find(' '); p != std::string::npos; p = line.find(' ', p + 1)) {
        std::string x = line.substr(0, p), y = line.substr(p + 1);
        if (!x.empty() && !y.empty() && find_token(x) >= 0 && find_token(y) >= 0 && find_token(merged_of(x, y)) >= 0) {
          a = std::move(x);
          b = std::move(y);
          break;
        }
      }
      CYPRIS_CHECK(!a.empty(), "{}: merge {} '{}' is not two vocabulary tokens separated by a space", where, rank,
                   line);
    }
    int32_t ia = find_token(a), ib = find_token(b);
    CYPRIS_CHECK(ia >= 0 && ib >= 0, "{}: merge {} '{} {}' uses a token missing from the vocabulary", where, rank, a,
                 b);
    std::string merged = merged_of(a, b);
    int32_t im = find_token(merged);
    CYPRIS_CHECK(im >= 0, "{}: merge {} '{} {}' makes '{}', which is missing from the vocabulary", where, rank, a, b,
                 merged);
    merges_->put(pair_key(ia, ib), int32_t(rank), im);
  }
  cache_ = std::make_unique<Cache>();
}

BpeModel::~BpeModel() = default;

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  int32_t id = find_token(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= id_to_token_.size() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

int32_t BpeModel::char_id(std::string_view ch, bool first, bool last) const {
  bool affix = (!first && !opts_.continuing_subword_prefix.empty()) || (last && !opts_.end_of_word_suffix.empty());
  if (!affix) {
    size_t i = 0;
    uint32_t cp = unicode::next_cp(ch, i);
    if (cp < 0x10000) return bmp_char_id_[cp];
    return find_token(ch);
  }
  std::string s;
  if (!first) s += opts_.continuing_subword_prefix;
  s += ch;
  if (last) s += opts_.end_of_word_suffix;
  return find_token(s);
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id, prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  auto push = [&](int32_t id) {
    int32_t n = int32_t(syms.size());
    syms.push_back({id, n - 1, n + 1});
  };
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t start = i;
    unicode::next_cp(word, i);
    std::string_view ch = word.substr(start, i - start);
    int32_t id = char_id(ch, start == 0, i == word.size());
    if (id >= 0) {
      push(id);
      last_unk = false;
      continue;
    }
    if (opts_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[uint8_t(c)] >= 0;
      if (all) {
        for (char c : ch) push(byte_ids_[uint8_t(c)]);
        last_unk = false;
        continue;
      }
    }
    if (!unk_id_) continue;  // no unk token: the character is dropped, as Hugging Face does
    if (opts_.fuse_unk && last_unk) continue;
    push(*unk_id_);
    last_unk = true;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  if (syms.size() <= 16) {
    // Short words: scanning for the lowest-ranked pair beats a heap and allocates nothing.
    for (;;) {
      int32_t best_pos = -1, best_rank = INT32_MAX, best_id = -1;
      for (int32_t p = 0; p >= 0 && syms[p].next >= 0; p = syms[p].next) {
        const auto* m = merges_->get(pair_key(syms[p].id, syms[syms[p].next].id));
        if (m && m->rank < best_rank) {
          best_rank = m->rank;
          best_pos = p;
          best_id = m->id;
        }
      }
      if (best_pos < 0) break;
      Sym& s = syms[best_pos];
      int32_t nx = s.next;
      s.id = best_id;
      s.next = syms[nx].next;
      if (s.next >= 0) syms[s.next].prev = best_pos;
    }
    for (int32_t p = 0; p >= 0; p = syms[p].next) out.push_back(syms[p].id);
    return;
  }
  struct Cand {
    int32_t rank, pos, id;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand> heap;
  auto consider = [&](int32_t pos) {
    int32_t nx = syms[pos].next;
    if (nx < 0) return;
    if (const auto* m = merges_->get(pair_key(syms[pos].id, syms[nx].id))) heap.push({m->rank, pos, m->id});
  };
  for (int32_t p = 0; p + 1 < int32_t(syms.size()); ++p) consider(p);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Sym& s = syms[c.pos];
    if (s.id < 0 || s.next < 0) continue;
    const auto* m = merges_->get(pair_key(s.id, syms[s.next].id));
    if (!m || m->rank != c.rank) continue;  // stale: one side was merged away since
    int32_t nx = s.next;
    s.id = c.id;
    s.next = syms[nx].next;
    syms[nx].id = -1;
    if (s.next >= 0) syms[s.next].prev = c.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }
  for (int32_t p = 0; p >= 0; p = syms[p].next) out.push_back(syms[p].id);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (split_at_metaspace_ && word.size() > 48) {
    // Cut before each "▁" run; see split_at_metaspace_.
    static constexpr std::string_view kMeta = "\xE2\x96\x81";
    size_t start = 0;
    for (size_t p = word.find(kMeta, 1); p != std::string_view::npos; p = word.find(kMeta, p + 3)) {
      if (p >= start + 3 && word.compare(p - 3, 3, kMeta) == 0) continue;
      if (p > start) {
        encode_word(word.substr(start, p - start), out);
        start = p;
      }
    }
    if (start > 0) {
      encode_word(word.substr(start), out);
      return;
    }
  }
  bool cacheable = word.size() <= 64;
  Cache::Shard* shard = nullptr;
  if (cacheable) {
    shard = &cache_->shards[std::hash<std::string_view>{}(word) % Cache::kShards];
    std::lock_guard<std::mutex> lock(shard->mu);
    auto it = shard->map.find(word);
    if (it != shard->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t before = out.size();
  int32_t whole = opts_.ignore_merges ? find_token(word) : -1;
  if (whole >= 0) {
    out.push_back(whole);
  } else {
    merge_word(word, out);
  }
  if (cacheable) {
    std::vector<int32_t> ids(out.begin() + long(before), out.end());
    std::lock_guard<std::mutex> lock(shard->mu);
    if (shard->map.size() >= Cache::kShardCapacity) shard->map.clear();
    shard->map.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace cypris
