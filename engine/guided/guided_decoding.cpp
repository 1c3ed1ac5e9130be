// Grammar compile cache, per-sequence matcher and the engine's masker cache (see guided_decoding.h).
#include "engine/guided/guided_decoding.h"

#include <nlohmann/json.hpp>
#include <set>
#include <algorithm>
#include <condition_variable>
#include <thread>

#include "engine/common/error.h"
#include "engine/common/json_depth.h"
#include "engine/guided/ebnf.h"
#include "engine/guided/json_schema.h"
#include "engine/guided/regex_grammar.h"

namespace cypris::guided {

const char* kind_name(GuidedKind k) {
  switch (k) {
    case GuidedKind::None: return "none";
    case GuidedKind::JsonSchema: return "json_schema";
    case GuidedKind::JsonObject: return "json_object";
    case GuidedKind::Regex: return "regex";
    case GuidedKind::Choice: return "choice";
    case GuidedKind::Lark: return "grammar";
    case GuidedKind::Gbnf: return "gbnf";
  }
  return "?";
}

namespace {

Grammar build(const GuidedDecodingParams& p) {
  switch (p.kind) {
    case GuidedKind::JsonSchema: {
      nlohmann::json schema;
      // Parsing is iterative, but the compiler copies, compares and prints parts of the schema
      // (recursive operations): a nesting bound first.
      CYPRIS_CHECK(json_nesting(p.text) <= kMaxJsonNesting,
                   "guided_json: the schema nests arrays and objects more than {} levels deep (the limit)",
                   kMaxJsonNesting);
      try {
        schema = nlohmann::json::parse(p.text);
      } catch (const nlohmann::json::exception& e) {
        // parse_error, and out_of_range for numbers past a double (1e400; found by GuidedFuzz).
        CYPRIS_FAIL("guided_json: the schema is not valid JSON: {}", e.what());
      }
      return json_schema_grammar(schema, JsonSchemaOptions{"guided_json", p.whitespace_pattern});
    }
    case GuidedKind::JsonObject:
      return json_object_grammar(JsonSchemaOptions{"response_format", p.whitespace_pattern});
    case GuidedKind::Regex:
      return regex_grammar(p.text, "guided_regex");
    case GuidedKind::Choice: {
      CYPRIS_CHECK(!p.choices.empty(), "guided_choice: give at least one choice");
      CYPRIS_CHECK(p.choices.size() <= kMaxChoices, "guided_choice: {} choices; at most {} (the limit)",
                   p.choices.size(), kMaxChoices);
      size_t bytes = 0;
      for (const auto& c : p.choices) bytes += c.size();
      CYPRIS_CHECK(bytes <= kMaxChoiceBytes, "guided_choice: the choices hold {} bytes; at most {} (the limit)", bytes,
                   kMaxChoiceBytes);
      CompileBudget budget("guided_choice");
      GrammarBuilder b;
      int root = b.rule("root");
      std::vector<ExprPtr> alts;
      for (const auto& c : p.choices) alts.push_back(literal(c));
      b.define(root, alt(std::move(alts)));
      return b.build(root, "guided_choice");
    }
    case GuidedKind::Lark:
      return lark_grammar(p.text, "guided_grammar");
    case GuidedKind::Gbnf:
      return gbnf_grammar(p.text, "grammar");
    case GuidedKind::None:
      break;
  }
  CYPRIS_FAIL("guided decoding: no grammar given");
}

// Compiled grammars by cache key, most recent first; bounded so a stream of distinct schemas
// cannot hold memory forever.
struct GrammarCache {
  static constexpr size_t kCapacity = 64;
  std::mutex mu;
  size_t bytes = 0;  // Grammar::memory_bytes() of the entries
  std::list<std::pair<std::string, std::shared_ptr<const Grammar>>> lru;
  std::unordered_map<std::string, decltype(lru)::iterator> index;
};

GrammarCache& grammar_cache() {
  static GrammarCache c;
  return c;
}

// At most kMaxConcurrentCompiles compiles run at once; the others wait their turn.
class CompileSlot {
 public:
  CompileSlot() {
    std::unique_lock<std::mutex> lock(mu());
    cv().wait(lock, [] { return running() < max_running(); });
    ++running();
  }
  ~CompileSlot() {
    {
      std::lock_guard<std::mutex> lock(mu());
      --running();
    }
    cv().notify_one();
  }
  CompileSlot(const CompileSlot&) = delete;
  CompileSlot& operator=(const CompileSlot&) = delete;

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::condition_variable& cv() {
    static std::condition_variable c;
    return c;
  }
  static int& running() {
    static int n = 0;
    return n;
  }
  static int max_running() {
    static const int n = std::max(kMaxConcurrentCompiles, static_cast<int>(std::thread::hardware_concurrency() / 4));
    return n;
  }
};

}  // namespace

std::shared_ptr<const Grammar> compile(const GuidedDecodingParams& p) {
  const std::string key = p.cache_key();
  GrammarCache& c = grammar_cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.index.find(key);
    if (it != c.index.end()) {
      c.lru.splice(c.lru.begin(), c.lru, it->second);
      return it->second->second;
    }
  }
  std::shared_ptr<const Grammar> g;
  {
    // Outside the cache lock (compiling may take a while), and at most a few at once: each may use
    // up to its step budget of CPU and a few hundred MB while it builds.
    CompileSlot slot;
    g = std::make_shared<const Grammar>(build(p));
  }
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.index.find(key);
  if (it != c.index.end()) return it->second->second;
  c.lru.emplace_front(key, g);
  c.index[key] = c.lru.begin();
  c.bytes += g->memory_bytes() + key.capacity();
  // Bounded by bytes as well as entries: a few large grammars must not pin gigabytes. The newest
  // entry stays even when it alone is over (the request is using it).
  while (c.lru.size() > 1 && (c.lru.size() > GrammarCache::kCapacity || c.bytes > kMaxGrammarCacheBytes)) {
    c.bytes -= c.lru.back().second->memory_bytes() + c.lru.back().first.capacity();
    c.index.erase(c.lru.back().first);
    c.lru.pop_back();
  }
  return g;
}

GuidedMatcher::GuidedMatcher(std::shared_ptr<TokenMasker> masker)
    : masker_(std::move(masker)), arena_(std::make_shared<StackArena>(masker_->grammar_ptr())) {
  Stepper st(*arena_);
  history_.push_back(st.initial());
}

void GuidedMatcher::fill_mask(std::span<uint32_t> mask) { masker_->fill(*arena_, history_.back(), mask); }

bool GuidedMatcher::accept(int32_t token) {
  const TokenVocab& v = masker_->vocab();
  if (token < 0 || token >= v.size) return false;
  const MatchState& cur = history_.back();
  if (v.bytes[token].empty()) {
    // End tokens: allowed when the grammar can end; the state stays (the sequence stops).
    bool end = std::find(v.end_ids.begin(), v.end_ids.end(), token) != v.end_ids.end();
    if (!end || !cur.can_end) return false;
    history_.push_back(cur);
    return true;
  }
  MatchState next = cur;
  Stepper st(*arena_);
  if (!st.advance(next, v.bytes[token])) return false;
  history_.push_back(std::move(next));
  return true;
}

void GuidedMatcher::rollback(size_t n) {
  n = std::min(n, history_.size() - 1);
  history_.resize(history_.size() - n);
}

namespace {

// The request field that gave the grammar, for messages.
const char* grammar_field(const GuidedDecodingParams& g) {
  switch (g.kind) {
    case GuidedKind::JsonSchema: return "guided_json (or response_format json_schema, or the tools' schema)";
    case GuidedKind::JsonObject: return "response_format json_object";
    case GuidedKind::Regex: return "guided_regex";
    case GuidedKind::Choice: return "guided_choice";
    case GuidedKind::Lark: return "guided_grammar";
    case GuidedKind::Gbnf: return "grammar";
    case GuidedKind::None: break;
  }
  return "the grammar";
}

}  // namespace

void check_token_restrictions(const GuidedMatcher& m, const SamplingParams& p) {
  if (!p.allowed_token_ids && p.custom_token_bans.empty()) return;
  const TokenVocab& v = m.masker_->vocab();
  std::vector<uint8_t> ok(static_cast<size_t>(v.size), p.allowed_token_ids ? 0 : 1);
  if (p.allowed_token_ids)
    for (int32_t id : *p.allowed_token_ids)
      if (id >= 0 && id < v.size) ok[id] = 1;
  for (int32_t id : p.custom_token_bans)
    if (id >= 0 && id < v.size) ok[id] = 0;
  bool end_ok = false;
  for (int32_t id : v.end_ids) end_ok = end_ok || (id >= 0 && id < v.size && ok[id]);
  std::string restrictions = p.allowed_token_ids && !p.custom_token_bans.empty() ? "allowed_token_ids and custom_token_bans"
                             : p.allowed_token_ids                             ? "allowed_token_ids"
                                                                               : "custom_token_bans";
  // A search over the states the permitted tokens lead to: one that may end (with a permitted end
  // token, or with nothing left to generate) proves the request can be answered.
  auto arena = m.arena_;
  Stepper st(*arena);
  std::vector<MatchState> todo{m.history_.back()};
  std::set<std::pair<std::vector<int32_t>, bool>> seen{{todo[0].tops, todo[0].can_end}};
  std::vector<uint32_t> mask(m.masker_->mask_words());
  bool first = true, first_blocked = false;
  while (!todo.empty()) {
    MatchState s = std::move(todo.back());
    todo.pop_back();
    if (s.can_end && (s.tops.empty() || end_ok)) return;
    m.masker_->fill(*arena, s, mask);
    bool any = false;
    for (int32_t id = 0; id < v.size; ++id) {
      if (!((mask[id >> 5] >> (id & 31)) & 1u) || !ok[id] || v.bytes[id].empty()) continue;
      any = true;
      MatchState next = s;
      if (!st.advance(next, v.bytes[id])) continue;
      if (!seen.insert({next.tops, next.can_end}).second) continue;
      if (seen.size() > static_cast<size_t>(kMaxSatisfiabilityStates)) return;  // undecided: accept
      todo.push_back(std::move(next));
    }
    if (first) first_blocked = !any;
    first = false;
  }
  CYPRIS_FAIL("no output can satisfy both {} and {}: {}", grammar_field(p.guided), restrictions,
              first_blocked ? "none of the tokens the grammar allows first is permitted"
                            : "every way the grammar can go runs into a token that is not permitted");
}

GuidedDecoder::GuidedDecoder(std::shared_ptr<const TokenVocab> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {}

std::unique_ptr<GuidedMatcher> GuidedDecoder::make_matcher(const GuidedDecodingParams& p) {
  const std::string key = p.cache_key();
  std::shared_ptr<TokenMasker> m;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      m = it->second->second;
    }
  }
  if (!m) {
    m = std::make_shared<TokenMasker>(compile(p), vocab_);
    std::lock_guard<std::mutex> lock(mu_);
    lru_.emplace_front(key, m);
    index_[key] = lru_.begin();
  }
  {
    // Bounded by bytes as well as entries. Maskers grow as their contexts are cached, so the
    // total is taken now; the one just used stays (its requests are running).
    std::lock_guard<std::mutex> lock(mu_);
    size_t total = 0;
    for (const auto& [k, masker] : lru_) total += masker->memory_bytes();
    while (lru_.size() > 1 && (lru_.size() > capacity_ || total > kMaxMaskerCacheBytes)) {
      total -= lru_.back().second->memory_bytes();
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  return std::make_unique<GuidedMatcher>(std::move(m));
}

}  // namespace cypris::guided
