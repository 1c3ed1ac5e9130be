// Guided decoding: cost of one token mask (TokenMasker::fill) for a JSON Schema over Llama 3's
// 128k vocabulary, single thread. Random walks through the schema pick a random allowed token at
// each step (short tokens preferred, like a model writing JSON); each walk is timed twice: cold
// (the per-context cache is being filled: the first request with this schema) and warm (every
// later request). Reports p50 / p99 / max per token and the one-off costs (vocabulary, compile).
// Target (issue #19): warm p99 <= 1 ms.
// Usage: bench_guided_mask [tokenizer folder] [walks]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/guided/guided_decoding.h"
#include "engine/guided/json_schema.h"
#include "engine/tokenizer/tokenizer.h"

using namespace cypris;
using namespace cypris::guided;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "id":{"type":"string","format":"uuid"},
  "name":{"type":"string","maxLength":40},
  "age":{"type":"integer","minimum":0,"maximum":150},
  "email":{"type":"string","format":"email"},
  "score":{"type":"number","minimum":0,"maximum":100},
  "active":{"type":"boolean"},
  "tags":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":5},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
             "zip":{"type":"string","pattern":"[0-9]{5}"}},"required":["street","city"]},
  "role":{"enum":["admin","user","guest"]},
  "notes":{"anyOf":[{"type":"string"},{"type":"null"}]}},
  "required":["id","name","age","active","tags","address","role"]})";

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void report(const char* what, std::vector<double> t) {
  if (t.empty()) return;
  std::sort(t.begin(), t.end());
  auto q = [&](double p) { return t[std::min(t.size() - 1, static_cast<size_t>(p * t.size()))]; };
  double sum = 0;
  for (double x : t) sum += x;
  std::printf("%-6s masks: %6zu  mean %.3f ms  p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", what, t.size(),
              sum / t.size(), q(0.5), q(0.99), t.back());
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : std::string(CYPRIS_TESTDATA_DIR) + "/tokenizers/llama3-bpe";
  int walks = argc > 2 ? std::atoi(argv[2]) : 20;
  auto t0 = Clock::now();
  auto tok = load_tokenizer(dir);
  auto t1 = Clock::now();
  auto vocab = vocab_from_tokenizer(*tok, 0, {});
  auto t2 = Clock::now();
  GuidedDecodingParams p;
  p.kind = GuidedKind::JsonSchema;
  p.text = kSchema;
  p.whitespace_pattern = " ?";
  auto grammar = compile(p);
  auto t3 = Clock::now();
  std::printf("tokenizer %s: %d tokens (load %.0f ms), vocabulary bytes + sort %.0f ms, schema compile %.2f ms "
              "(%zu rules, %zu elements)\n",
              dir.c_str(), vocab->size, ms(t1 - t0), ms(t2 - t1), ms(t3 - t2), grammar->num_rules(),
              grammar->elems.size());
  auto masker = std::make_shared<TokenMasker>(grammar, vocab);
  std::vector<uint32_t> mask(masker->mask_words());
  std::mt19937_64 rng(42);
  std::vector<double> cold, warm;
  size_t total_tokens = 0, total_allowed = 0;
  for (int w = 0; w < walks; ++w) {
    // Cold pass: pick the path.
    GuidedMatcher m(masker);
    std::vector<int32_t> path;
    for (int step = 0; step < 400 && !m.terminated(); ++step) {
      auto a = Clock::now();
      m.fill_mask(mask);
      cold.push_back(ms(Clock::now() - a));
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size; ++id)
        if (((mask[id >> 5] >> (id & 31)) & 1u) && !vocab->bytes[id].empty()) allowed.push_back(id);
      total_allowed += allowed.size();
      if (allowed.empty()) break;
      // Prefer short tokens 3:1 (JSON is written in short pieces), else any.
      std::vector<int32_t> short_ones;
      for (int32_t id : allowed)
        if (vocab->bytes[id].size() <= 3) short_ones.push_back(id);
      const auto& pool = (!short_ones.empty() && rng() % 4) ? short_ones : allowed;
      int32_t t = pool[rng() % pool.size()];
      if (!m.accept(t)) {
        std::fprintf(stderr, "error: an allowed token was refused\n");
        return 1;
      }
      path.push_back(t);
    }
    total_tokens += path.size();
    // Warm pass: the same path again.
    GuidedMatcher again(masker);
    for (int32_t t : path) {
      auto a = Clock::now();
      again.fill_mask(mask);
      warm.push_back(ms(Clock::now() - a));
      again.accept(t);
    }
  }
  std::printf("%d walks, %zu tokens, %.0f allowed tokens per mask on average, %zu cached contexts\n", walks,
              total_tokens, static_cast<double>(total_allowed) / std::max<size_t>(1, cold.size()),
              masker->cached_keys());
  report("cold", cold);
  report("warm", warm);
  return 0;
}
