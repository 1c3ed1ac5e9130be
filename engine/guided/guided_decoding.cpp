// Grammar compile cache, per-sequence matcher and the engine's masker cache (see guided_decoding.h).
#include "engine/guided/guided_decoding.h"

#include <nlohmann/json.hpp>
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
      } catch (const nlohmann::json::parse_error& e) {
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
  while (c.lru.size() > GrammarCache::kCapacity) {
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
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  return std::make_unique<GuidedMatcher>(std::move(m));
}

}  // namespace cypris::guided
