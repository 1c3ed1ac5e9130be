// Guided decoding under hostile-sized grammars (issue #26 item 6), over a large vocabulary (Llama
// 3's 128k tokens by default): for each grammar the compile time and its memory, the first
// (cold) mask, a short random walk's masks, and the masker's bytes afterwards; then a storm of
// distinct schemas through one GuidedDecoder (as the engine holds it) with the process RSS before
// and after. Single thread. Usage: bench_guided_limits [tokenizer folder] [storm schemas]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/guided/guided_decoding.h"
#include "engine/tokenizer/tokenizer.h"

using namespace cypris;
using namespace cypris::guided;
using Clock = std::chrono::steady_clock;

namespace {

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return 0;
}

std::string rep(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

GuidedDecodingParams schema(std::string text) {
  GuidedDecodingParams p;
  p.kind = GuidedKind::JsonSchema;
  p.text = std::move(text);
  return p;
}

std::string props(int n) {
  std::string t = R"({"type":"object","properties":{)";
  for (int i = 0; i < n; ++i) t += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\":{\"type\":\"string\"}";
  return t + "}}";
}

void run_one(const char* name, const GuidedDecodingParams& p, std::shared_ptr<const TokenVocab> v, int steps) {
  const double rss0 = rss_mb();
  auto t0 = Clock::now();
  std::shared_ptr<const Grammar> g;
  try {
    g = compile(p);
  } catch (const std::exception& e) {
    std::printf("%-28s refused in %.1f ms: %.100s\n", name, ms(Clock::now() - t0), e.what());
    return;
  }
  const double compile_ms = ms(Clock::now() - t0);
  auto masker = std::make_shared<TokenMasker>(g, v);
  GuidedMatcher m(masker);
  std::vector<uint32_t> mask(masker->mask_words());
  std::mt19937_64 rng(1);
  double first = 0, worst = 0, total = 0;
  int n = 0;
  for (int s = 0; s < steps; ++s) {
    auto a = Clock::now();
    m.fill_mask(mask);
    const double t = ms(Clock::now() - a);
    if (s == 0) first = t;
    worst = std::max(worst, t);
    total += t;
    ++n;
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < v->size; ++id)
      if (((mask[id >> 5] >> (id & 31)) & 1u) && !v->bytes[id].empty() && v->bytes[id].size() <= 2) ids.push_back(id);
    if (ids.empty()) break;
    if (!m.accept(ids[rng() % ids.size()])) break;
  }
  std::printf("%-28s compile %8.1f ms, grammar %6.1f MB; masks: first %7.1f ms, mean %6.1f ms, max %7.1f ms (%d); "
              "masker %6.1f MB; RSS +%.0f MB\n",
              name, compile_ms, g->memory_bytes() / 1e6, first, total / std::max(n, 1), worst, n,
              masker->memory_bytes() / 1e6, rss_mb() - rss0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::string(CYPRIS_TESTDATA_DIR) + "/tokenizers/llama3-bpe";
  const int storm = argc > 2 ? std::atoi(argv[2]) : 70;
  const double rss_start = rss_mb();
  auto t0 = Clock::now();
  auto tok = load_tokenizer(dir);
  auto v = vocab_from_tokenizer(*tok, 0, {});
  std::printf("vocabulary: %d tokens, loaded in %.0f ms, RSS %.0f -> %.0f MB\n", v->size, ms(Clock::now() - t0),
              rss_start, rss_mb());

  GuidedDecodingParams deep_regex;
  deep_regex.kind = GuidedKind::Regex;
  deep_regex.text = rep("(a|", 250) + "b" + rep(")", 250);
  GuidedDecodingParams long_regex;
  long_regex.kind = GuidedKind::Regex;
  long_regex.text = rep("[a-z]", 13000);
  run_one("10 properties", schema(props(10)), v, 40);
  run_one("1000 properties", schema(props(1000)), v, 40);
  run_one("10000 properties", schema(props(10000)), v, 10);
  run_one("arrays nested 250", schema(rep(R"({"type":"array","items":)", 250) + R"({"type":"integer"})" + rep("}", 250)), v, 300);
  run_one("objects nested 250", schema(rep(R"({"type":"object","properties":{"a":)", 250) + R"({"type":"integer"})" + rep("}}", 250)), v, 300);
  run_one("regex alternation 250 deep", deep_regex, v, 10);
  run_one("regex 13000 classes (64 KiB)", long_regex, v, 40);
  run_one("arrays nested 5000 (refused)", schema(rep(R"({"type":"array","items":)", 5000) + "{}" + rep("}", 5000)), v, 1);

  // A storm of distinct small schemas through one decoder, three masks each.
  GuidedDecoder dec(v);
  const double before = rss_mb();
  auto s0 = Clock::now();
  std::vector<uint32_t> mask((static_cast<size_t>(v->size) + 31) / 32);
  for (int i = 0; i < storm; ++i) {
    auto m = dec.make_matcher(schema(R"({"type":"object","properties":{"k)" + std::to_string(i) +
                                      R"(":{"type":"integer"},"s":{"type":"string","maxLength":)" + std::to_string(5 + i) +
                                      "}},\"required\":[\"k" + std::to_string(i) + "\"]}"));
    for (int s = 0; s < 3; ++s) {
      m->fill_mask(mask);
      for (int32_t id = 0; id < v->size; ++id)
        if (((mask[id >> 5] >> (id & 31)) & 1u) && !v->bytes[id].empty()) {
          m->accept(id);
          break;
        }
    }
  }
  std::printf("storm: %d distinct schemas x 3 masks in %.1f s; RSS %.0f -> %.0f MB\n", storm,
              ms(Clock::now() - s0) / 1000, before, rss_mb());
  return 0;
}
