// bench_context_shift: what --context-shift costs by recomputing the moved tokens versus rotating
// their cached keys, on the CPU. One greedy request generates well past the context length of a
// Llama-shaped model with dummy weights (each shift drops half of the window after the kept prefix);
// the rounds alternate the two modes (the machine may be shared: compare the medians) and print the
// wall time of the whole generation, the shifts and the tokens whose KV a rotation kept. Then, on
// stories260k (trained weights), how far rotated runs stay from the recomputed (exact) ones: the
// greedy tokens equal before the first difference and in all.
// Usage: bench_context_shift [hidden] [layers] [context] [max_tokens] [rounds] [threads]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"

using namespace cypris;

namespace {

std::filesystem::path write_config(int hidden, int layers, int context) {
  const auto dir = std::filesystem::temp_directory_path() / "cypris_bench_context_shift";
  std::filesystem::create_directories(dir);
  std::ofstream f(dir / "config.json");
  f << "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":" << hidden
    << ",\"intermediate_size\":" << hidden * 8 / 3 / 64 * 64 << ",\"num_hidden_layers\":" << layers
    << ",\"num_attention_heads\":" << hidden / 64 << ",\"num_key_value_heads\":" << std::max(1, hidden / 256)
    << ",\"vocab_size\":8192,\"max_position_embeddings\":" << context
    << ",\"rms_norm_eps\":1e-5,\"tie_word_embeddings\":true}";
  return dir;
}

EngineConfig base(const std::string& model, int context, int threads, const std::string& mode) {
  EngineConfig cfg;
  cfg.model.model = model;
  cfg.model.dtype = "float32";
  cfg.model.max_model_len = context;
  cfg.device.device = "cpu";
  cfg.device.threads = threads;
  cfg.logging.disable_log_stats = true;
  cfg.logging.disable_log_requests = true;
  cfg.quant.kv_cache_dtype = "float32";
  cfg.cache.context_shift = true;
  cfg.cache.context_shift_mode = mode;
  cfg.cache.enable_prefix_caching = false;
  cfg.cache.cpu_kvcache_space = 0.25;  // GiB: plenty for one request, frugal on a shared machine
  cfg.scheduler.enable_chunked_prefill = false;
  return cfg;
}

struct Run {
  std::vector<int32_t> tokens;
  double seconds = 0;
  int64_t shifts = 0, moved = 0;
};

Run generate(Engine& engine, const std::vector<int32_t>& prompt, int max_tokens) {
  static int id = 0;
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = max_tokens;
  p->ignore_eos = true;
  const std::string rid = "b" + std::to_string(id++);
  auto stream = std::make_shared<RequestStream>(rid);
  const EngineStats before = engine.stats();
  const auto t0 = std::chrono::steady_clock::now();
  engine.add_request(GenerateRequest{rid, prompt, "", p}, stream);
  Run r;
  while (engine.has_unfinished_requests()) {
    engine.step();
    while (auto o = stream->next(std::chrono::milliseconds(0))) {
      if (o->error) {
        std::fprintf(stderr, "error: %s\n", o->error->c_str());
        std::exit(1);
      }
      for (const auto& d : o->outputs) r.tokens.insert(r.tokens.end(), d.token_ids.begin(), d.token_ids.end());
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.shifts = engine.stats().num_context_shifts_total - before.num_context_shifts_total;
  r.moved = engine.stats().context_shift_moved_tokens_total - before.context_shift_moved_tokens_total;
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int hidden = argc > 1 ? std::atoi(argv[1]) : 512;
  const int layers = argc > 2 ? std::atoi(argv[2]) : 8;
  const int context = argc > 3 ? std::atoi(argv[3]) : 1024;
  const int max_tokens = argc > 4 ? std::atoi(argv[4]) : 2048;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 3;
  const int threads = argc > 6 ? std::atoi(argv[6]) : 2;
  const auto dir = write_config(hidden, layers, context);
  std::printf("dummy Llama: hidden %d, %d layers, context %d; prompt %d tokens, %d generated; %d threads\n", hidden,
              layers, context, context / 2, max_tokens, threads);
  std::mt19937 rng(1);
  std::vector<int32_t> prompt(size_t(context / 2));
  for (auto& t : prompt) t = int32_t(rng() % 8000) + 3;
  std::vector<double> times[2];
  const char* modes[2] = {"recompute", "rotate"};
  std::unique_ptr<Engine> engines[2];
  for (int m = 0; m < 2; ++m) {
    EngineConfig cfg = base(dir.string(), context, threads, modes[m]);
    cfg.model.load_format = "dummy";
    cfg.model.skip_tokenizer_init = true;
    engines[m] = std::make_unique<Engine>(cfg);
  }
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const int m = (round + k) % 2;  // alternate which mode goes first
      const Run r = generate(*engines[m], prompt, max_tokens);
      times[m].push_back(r.seconds);
      std::printf("round %d %-9s %7.2f s  %5.1f tok/s  shifts %lld  tokens moved by rotation %lld\n", round, modes[m],
                  r.seconds, double(r.tokens.size()) / r.seconds, (long long)r.shifts, (long long)r.moved);
    }
  }
  std::printf("median: recompute %.2f s, rotate %.2f s: rotation takes %.0f%% of the time\n", median(times[0]),
              median(times[1]), 100.0 * median(times[1]) / median(times[0]));

  const std::string stories = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  if (!std::filesystem::exists(stories)) return 0;
  std::printf("\nstories260k, context 96, greedy, 300 tokens: rotated vs recomputed tokens\n");
  Engine rec(base(stories, 96, threads, "recompute")), rot(base(stories, 96, threads, "rotate"));
  for (uint32_t seed = 0; seed < 6; ++seed) {
    std::mt19937 g(seed);
    std::vector<int32_t> p = {1};
    for (int i = 0; i < 20 + int(seed) * 8; ++i) p.push_back(int32_t(g() % 500) + 3);
    const Run a = generate(rec, p, 300), b = generate(rot, p, 300);
    size_t first = 0;
    while (first < a.tokens.size() && first < b.tokens.size() && a.tokens[first] == b.tokens[first]) ++first;
    int same = 0;
    for (size_t i = 0; i < std::min(a.tokens.size(), b.tokens.size()); ++i) same += a.tokens[i] == b.tokens[i];
    std::printf("prompt %2zu tokens: %lld shifts, first shift after %d tokens, equal up to token %zu, %d of %zu equal\n",
                p.size(), (long long)b.shifts, 96 - int(p.size()), first, same, a.tokens.size());
  }
  return 0;
}
