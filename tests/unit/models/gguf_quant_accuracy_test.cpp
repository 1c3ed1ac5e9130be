// How much each quantized GGUF type loses, Cypris against llama.cpp, on the reference files
// (testdata/gguf): for every prompt position, the distance of the next-token distribution from the
// unquantized model's (llama.cpp's own logits of stories260k-F32 / tiny-random-F16), once for
// llama.cpp's logits of the quantized file (refs/) and once for Cypris's. Both read the same
// quantized weights (bit-exact dequantization, quant_dequant_test.cpp), so the difference is what
// each does to the activations; Cypris must lose no more than llama.cpp does.
//
// Distance: the Kullback-Leibler divergence KL(P_unquantized || P_quantized) of the next-token
// distribution, averaged over the 31 positions of the three prompts (what llama-perplexity's
// --kl-divergence reports), and the mean over positions of the largest |log p| change over the
// tokens the unquantized model gives p >= 1e-4. The test asserts both, with a 2% margin: for every
// type but Q8_0 Cypris quantizes the activations as llama.cpp does (8 bits, round to nearest, one
// scale per block of 32 or 256 values), so the two differ only where a value lands on the other
// side of a rounding step by chance; measured 0.99x-1.004x of llama.cpp's on every file.
//
// Q8_0 must do clearly better: llama.cpp quantizes the activations of an 8-bit weight type to 8
// bits too (Q8_0 blocks with an fp16 scale), which about doubles what the weights alone lose (the
// exact-activation path measures 0.47x and 0.58x of llama.cpp's KL on these files); Cypris gives
// Q8_0 weights 16-bit activations (kernels/cpu/quant/q8_0_acts16.h), so its KL must stay below
// 0.75x of llama.cpp's. With 8-bit activations it was 0.79x and 1.01x.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/runtime/model_runner.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kDir = fs::path(CYPRIS_TESTDATA_DIR) / "gguf";

struct Ref {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<float> logits;  // all positions of all prompts, n_vocab each
  int64_t vocab = 0;
};

Ref load_ref(const std::string& name) {
  Ref r;
  std::ifstream in(kDir / "refs" / (name + ".json"));
  const json j = json::parse(in);
  r.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  r.vocab = j["n_vocab"].get<int64_t>();
  std::ifstream lf(kDir / "refs" / (name + ".logits.f32"), std::ios::binary);
  lf.seekg(0, std::ios::end);
  r.logits.resize(static_cast<size_t>(lf.tellg()) / 4);
  lf.seekg(0);
  lf.read(reinterpret_cast<char*>(r.logits.data()), static_cast<std::streamsize>(r.logits.size() * 4));
  return r;
}

// Cypris's logits of every position of every prompt, each prompt in a fresh sequence.
std::vector<float> cypris_logits(const std::string& name, const Ref& ref) {
  ModelRunnerOptions o;
  o.model_dir = kDir / (name + ".gguf");
  o.load.dtype = "float32";
  o.threads = 2;
  o.num_blocks = 16;
  ModelRunner runner(o);
  std::vector<float> out;
  for (const auto& prompt : ref.prompts) {
    BatchContext b = make_single_sequence_batch(prompt, 0, runner.block_size());
    b.logits_indices.clear();
    for (int32_t i = 0; i < static_cast<int32_t>(prompt.size()); ++i) b.logits_indices.push_back(i);
    const Logits l = runner.execute(b);
    EXPECT_EQ(l.vocab, ref.vocab);
    out.insert(out.end(), l.data.begin(), l.data.end());
  }
  EXPECT_EQ(out.size(), ref.logits.size());
  return out;
}

std::vector<double> log_softmax(const float* x, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mx - std::log(sum);
  return y;
}

struct Distance {
  double kl = 0;        // mean over positions
  double max_dlogp = 0;  // mean over positions of the largest |log p change| where p >= 1e-4
};

Distance distance(const std::vector<float>& base, const std::vector<float>& quant, int64_t vocab) {
  Distance d;
  const int64_t rows = static_cast<int64_t>(base.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> p = log_softmax(base.data() + r * vocab, vocab);
    const std::vector<double> q = log_softmax(quant.data() + r * vocab, vocab);
    double kl = 0, worst = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      kl += std::exp(p[v]) * (p[v] - q[v]);
      if (p[v] >= std::log(1e-4)) worst = std::max(worst, std::abs(p[v] - q[v]));
    }
    d.kl += kl / rows;
    d.max_dlogp += worst / rows;
  }
  return d;
}

struct Case {
  const char* file;
  const char* unquantized;
  double kl_factor = 1.02;  // Cypris's KL <= kl_factor x llama.cpp's
};

class GgufQuantAccuracy : public ::testing::TestWithParam<Case> {};

TEST_P(GgufQuantAccuracy, LosesNoMoreThanLlamaCpp) {
  const Case c = GetParam();
  const Ref base = load_ref(c.unquantized);
  const Ref llama = load_ref(c.file);
  ASSERT_EQ(base.logits.size(), llama.logits.size());
  const std::vector<float> ours = cypris_logits(c.file, llama);
  const Distance dl = distance(base.logits, llama.logits, base.vocab);
  const Distance dc = distance(base.logits, ours, base.vocab);
  std::printf("[ accuracy ] %-18s from %s: KL llama.cpp %.3g, Cypris %.3g (%.2fx); max |dlogp| llama.cpp %.4f, "
              "Cypris %.4f (%.2fx)\n",
              c.file, c.unquantized, dl.kl, dc.kl, dc.kl / dl.kl, dl.max_dlogp, dc.max_dlogp,
              dc.max_dlogp / dl.max_dlogp);
  constexpr double kMargin = 1.02;
  EXPECT_LE(dc.kl, dl.kl * c.kl_factor);
  EXPECT_LE(dc.max_dlogp, dl.max_dlogp * kMargin);
}

INSTANTIATE_TEST_SUITE_P(
    Files, GgufQuantAccuracy,
    ::testing::Values(Case{"stories260k-Q8_0", "stories260k-F32", 0.75}, Case{"stories260k-Q4_0", "stories260k-F32"},
                      Case{"tiny-random-Q8_0", "tiny-random-F16", 0.75}, Case{"tiny-random-Q4_0", "tiny-random-F16"},
                      Case{"tiny-random-Q4_1", "tiny-random-F16"}, Case{"tiny-random-Q5_0", "tiny-random-F16"},
                      Case{"tiny-random-Q5_1", "tiny-random-F16"}, Case{"tiny-random-Q2_K", "tiny-random-F16"},
                      Case{"tiny-random-Q3_K", "tiny-random-F16"}, Case{"tiny-random-Q4_K", "tiny-random-F16"},
                      Case{"tiny-random-Q5_K", "tiny-random-F16"}, Case{"tiny-random-Q6_K", "tiny-random-F16"},
                      Case{"tiny-random-IQ4_NL", "tiny-random-F16"}, Case{"tiny-random-IQ4_XS", "tiny-random-F16"},
                      Case{"tiny-random-Q4_K_M", "tiny-random-F16"}),
    [](const auto& info) {
      std::string n = info.param.file;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

}  // namespace
}  // namespace cypris
