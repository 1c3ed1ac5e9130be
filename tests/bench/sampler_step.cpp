// bench_sampler_step: one sampling step for 256 rows over a 128k vocabulary on the CPU, with
// top_p 0.9, min_p 0.05, repetition/frequency/presence penalties and 512 tokens of history per row.
// Logits are synthetic. "peaked" is shaped like a language model's next-token distribution: Gaussian
// noise (std 1.5) plus eight strong candidates (+16 .. +9), so the tail holds ~3% of the mass. "flat"
// is a worst case for top_p: noise std 2 and weaker candidates (+12 .. +5), so ~80% of the mass is in
// the tail and the nucleus is most of the vocabulary. Prints ms per step.
// Usage: bench_sampler_step [rows] [vocab] [steps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "engine/sampling/sampler.h"

using namespace cypris;

static double run(int rows, int vocab, int steps, int threads, const SamplingParams& params, const char* label,
                  bool flat = false) {
  SamplerConfig cfg;
  cfg.vocab_size = vocab;
  cfg.num_threads = threads;
  Sampler sampler(cfg);
  std::mt19937 gen(1);
  std::normal_distribution<float> noise(0.0f, flat ? 2.0f : 1.5f);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (int r = 0; r < rows; ++r) {
    float* x = logits.data() + static_cast<size_t>(r) * vocab;
    for (int v = 0; v < vocab; ++v) x[v] = noise(gen);
    for (int k = 0; k < 8; ++k) x[tok(gen)] += (flat ? 12.0f : 16.0f) - k;  // a few strong candidates
  }
  std::vector<SamplingParams> ps(rows, params);
  std::vector<SamplingState> states;
  for (int r = 0; r < rows; ++r) {
    ps[r].seed = static_cast<uint64_t>(r);
    std::vector<int32_t> prompt(448);
    for (auto& t : prompt) t = tok(gen);
    states.emplace_back(ps[r], std::move(prompt));
    for (int i = 0; i < 64; ++i) states.back().append(tok(gen));
  }
  std::vector<SamplerRow> batch;
  for (int r = 0; r < rows; ++r) batch.push_back({&ps[r], &states[r]});
  sampler.sample(logits.data(), batch);  // warm-up
  for (auto& s : states) s.rewind(1);
  double best = 1e30, total = 0.0;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    sampler.sample(logits.data(), batch);
    const auto t1 = std::chrono::steady_clock::now();
    for (auto& s : states) s.rewind(1);  // keep history at 512 tokens
    const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    best = std::min(best, ms);
    total += ms;
  }
  std::printf("%-6s %-40s rows=%d vocab=%d threads=%d: %.2f ms/step (mean of %d), best %.2f ms\n",
              flat ? "flat" : "peaked", label, rows, vocab, threads, total / steps, steps, best);
  return total / steps;
}

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 256;
  const int vocab = argc > 2 ? std::atoi(argv[2]) : 128000;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 5;
  const int hw = std::max(1u, std::thread::hardware_concurrency());

  SamplingParams full;
  full.temperature = 1.0f;
  full.top_p = 0.9f;
  full.min_p = 0.05f;
  full.repetition_penalty = 1.1f;
  full.frequency_penalty = 0.1f;
  full.presence_penalty = 0.1f;
  run(rows, vocab, steps, 1, full, "top_p+min_p+penalties");
  if (hw > 1) run(rows, vocab, steps, hw, full, "top_p+min_p+penalties");
  run(rows, vocab, steps, 1, full, "top_p+min_p+penalties", true);
  if (hw > 1) run(rows, vocab, steps, hw, full, "top_p+min_p+penalties", true);

  SamplingParams greedy;
  greedy.temperature = 0.0f;
  run(rows, vocab, steps, 1, greedy, "greedy (fast path)");
  SamplingParams topk;
  topk.temperature = 0.8f;
  topk.top_k = 40;
  topk.top_p = 0.95f;
  run(rows, vocab, steps, 1, topk, "temperature+top_k+top_p (fast path)");
  return 0;
}
