// Single-thread encoding speed of the tokenizers on ~1 MB of mixed text (English prose, code,
// numbers, CJK, emoji), built deterministically. Usage:
//   bench_tokenizer_encode [--mode auto|slow] [--repeat N] [tokenizer folder ...]
// --repeat N: encode N more times after the report (for profiling the encoder alone).
// With no folder: testdata's llama3-bpe and llama2-spm (tokenizer.json, then tokenizer.model).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace {

std::string make_text(size_t target) {
  static const char* kWords[] = {"the",
                                 "of",
                                 "and",
                                 "to",
                                 "in",
                                 "a",
                                 "is",
                                 "that",
                                 "for",
                                 "it",
                                 "as",
                                 "was",
                                 "with",
                                 "be",
                                 "by",
                                 "on",
                                 "not",
                                 "he",
                                 "I",
                                 "this",
                                 "are",
                                 "or",
                                 "his",
                                 "from",
                                 "at",
                                 "which",
                                 "but",
                                 "have",
                                 "an",
                                 "had",
                                 "they",
                                 "you",
                                 "were",
                                 "their",
                                 "one",
                                 "all",
                                 "we",
                                 "can",
                                 "her",
                                 "has",
                                 "there",
                                 "been",
                                 "if",
                                 "more",
                                 "when",
                                 "will",
                                 "would",
                                 "who",
                                 "so",
                                 "no",
                                 "model",
                                 "inference",
                                 "engine",
                                 "tokenizer",
                                 "scheduler",
                                 "memory",
                                 "cache",
                                 "attention",
                                 "request",
                                 "throughput",
                                 "latency",
                                 "sequence",
                                 "batch",
                                 "quickly",
                                 "however",
                                 "although",
                                 "mountains",
                                 "river",
                                 "government",
                                 "language",
                                 "history",
                                 "people",
                                 "Wednesday",
                                 "Einstein",
                                 "London",
                                 "photosynthesis",
                                 "unbelievable",
                                 "interoperability",
                                 "don't",
                                 "it's",
                                 "we're",
                                 "they'll",
                                 "I've",
                                 "Hello",
                                 "World",
                                 "Cypris",
                                 "Aphrodite",
                                 "naïve",
                                 "café",
                                 "résumé",
                                 "Zürich",
                                 "São",
                                 "Paulo",
                                 "Ελληνικά",
                                 "русский",
                                 "язык",
                                 "München",
                                 "Kraków"};
  static const char* kCode[] = {"if (",
                                ") {\n",
                                "}\n",
                                "return ",
                                " = ",
                                " == ",
                                "for (int i = 0; i < n; ++i) ",
                                "std::vector<int32_t> ",
                                "def ",
                                "(self, ",
                                "):\n    ",
                                "import ",
                                "#include <",
                                ">\n",
                                "    ",
                                "\t",
                                "// ",
                                "/* ",
                                " */",
                                "->",
                                "::",
                                "[",
                                "]",
                                "{",
                                "}",
                                ";\n"};
  std::mt19937 rng(20240521);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  std::string out;
  out.reserve(target + 256);
  auto ident = [&]() {
    std::string s;
    size_t len = 3 + pick(10);
    for (size_t i = 0; i < len; ++i) s += char('a' + pick(26));
    if (pick(3) == 0) s += "_" + std::to_string(pick(1000));
    return s;
  };
  while (out.size() < target) {
    size_t kind = pick(100);
    if (kind < 55) {  // prose paragraph
      size_t n = 20 + pick(60);
      for (size_t i = 0; i < n; ++i) {
        if (i) out += ' ';
        out += (pick(12) == 0) ? ident() : kWords[pick(sizeof(kWords) / sizeof(*kWords))];
        if (pick(15) == 0) out += ",";
      }
      out += pick(2) ? ".\n\n" : ". ";
    } else if (kind < 75) {  // code
      size_t n = 10 + pick(40);
      for (size_t i = 0; i < n; ++i) {
        out += kCode[pick(sizeof(kCode) / sizeof(*kCode))];
        out += ident();
      }
      out += "\n";
    } else if (kind < 85) {  // numbers
      size_t n = 5 + pick(20);
      for (size_t i = 0; i < n; ++i) {
        out += std::to_string(rng() % 100000000);
        out += pick(3) ? " " : (pick(2) ? ".5, " : "% ");
      }
      out += "\n";
    } else if (kind < 95) {  // CJK (common ideographs, kana, hangul)
      size_t n = 20 + pick(80);
      for (size_t i = 0; i < n; ++i) {
        uint32_t cp;
        size_t k = pick(10);
        if (k < 6) {
          cp = 0x4E00 + uint32_t(pick(3000));
        } else if (k < 8) {
          cp = 0x3041 + uint32_t(pick(83));
        } else {
          cp = 0xAC00 + uint32_t(pick(2000));
        }
        cypris::unicode::append_utf8(out, cp);
        if (pick(20) == 0) out += "。";
      }
      out += "\n";
    } else {  // emoji, some with ZWJ
      size_t n = 3 + pick(12);
      for (size_t i = 0; i < n; ++i) {
        cypris::unicode::append_utf8(out, 0x1F600 + uint32_t(pick(80)));
        if (pick(5) == 0) out += "\u200D\U0001F525";
        out += pick(2) ? " " : "";
      }
      out += "\n";
    }
  }
  return out;
}

int g_repeat = 0;

// Thread CPU time: the machine may be shared, and wall time then measures the neighbours too.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

void bench(const std::string& dir, const std::string& mode, const std::string& text) {
  cypris::TokenizerOptions opts;
  opts.mode = mode;
  auto t0 = std::chrono::steady_clock::now();
  auto tok = cypris::load_tokenizer(dir, opts);
  auto t1 = std::chrono::steady_clock::now();
  // One warm-up pass (word cache, JIT stacks), then the best of three.
  auto ids = tok->encode(text, false);
  double best = 1e9, best_cpu = 1e9;
  for (int r = 0; r < 3; ++r) {
    auto a = std::chrono::steady_clock::now();
    double ca = cpu_seconds();
    auto again = tok->encode(text, false);
    double cb = cpu_seconds();
    auto b = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(b - a).count());
    best_cpu = std::min(best_cpu, cb - ca);
    if (again != ids) std::printf("  WARNING: encoding is not deterministic\n");
  }
  // Cold: a fresh tokenizer (empty cache) on the same text.
  auto cold_tok = cypris::load_tokenizer(dir, opts);
  double c0 = cpu_seconds();
  cold_tok->encode(text, false);
  double cold = cpu_seconds() - c0;
  auto d0 = std::chrono::steady_clock::now();
  std::string back = tok->decode(ids, false);
  auto d1 = std::chrono::steady_clock::now();
  double mb = double(text.size()) / 1e6;
  std::printf("%s [mode %s]\n  load %.2f s, %zu bytes -> %zu tokens (%.2f bytes/token)\n", dir.c_str(), mode.c_str(),
              std::chrono::duration<double>(t1 - t0).count(), text.size(), ids.size(),
              double(text.size()) / double(ids.size()));
  std::printf("  encode (thread CPU time): %.1f MB/s warm cache, %.1f MB/s cold cache (wall, warm: %.1f MB/s)\n",
              mb / best_cpu, mb / cold, mb / best);
  std::printf("  decode: %.1f MB/s wall; round trip %s\n", mb / std::chrono::duration<double>(d1 - d0).count(),
              back == text ? "exact" : "DIFFERS");
  for (int r = 0; r < g_repeat; ++r) tok->encode(text, false);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "auto";
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a == "--repeat" && i + 1 < argc) {
      g_repeat = std::atoi(argv[++i]);
    } else {
      dirs.push_back(a);
    }
  }
  std::string text = make_text(1 << 20);
  try {
    if (dirs.empty()) {
      std::string base = std::string(CYPRIS_TESTDATA_DIR) + "/tokenizers/";
      bench(base + "llama3-bpe", "auto", text);
      bench(base + "llama2-spm", "auto", text);
      bench(base + "llama2-spm", "slow", text);
    } else {
      for (const auto& d : dirs) bench(d, mode, text);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
