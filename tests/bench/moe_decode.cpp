// bench_moe_decode: CPU decode speed of a Qwen3-MoE-shaped model (dummy weights, few layers)
// against two dense Qwen3 models: one with the MoE's *active* MLP width (top-k experts x expert
// width) and one with its *total* width (all experts). A mixture of experts should decode at the
// speed of its active parameters, not its total. Prints ms per decoded token (batch 1, after a
// 16-token prompt) and the parameter counts. On CUDA the activations are bf16 and the runs are eager
// (MoE layers route on the host, so they are not captured in graphs).
// Usage: bench_moe_decode [layers] [steps] [threads] [cpu|cuda]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/runtime/model_runner.h"

using namespace cypris;

namespace {

constexpr int kHidden = 1024, kHeads = 16, kKvHeads = 4, kHeadDim = 64, kVocab = 32000;
constexpr int kExperts = 64, kTopK = 8, kExpertWidth = 384;

std::filesystem::path write_config(const std::string& name, int layers, bool moe, int64_t mlp_width) {
  const auto dir = std::filesystem::temp_directory_path() / ("cypris_bench_" + name);
  std::filesystem::create_directories(dir);
  std::ofstream f(dir / "config.json");
  f << "{\"architectures\":[\"" << (moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM") << "\"],\"model_type\":\""
    << (moe ? "qwen3_moe" : "qwen3") << "\",\"hidden_size\":" << kHidden << ",\"intermediate_size\":" << mlp_width
    << ",\"num_hidden_layers\":" << layers << ",\"num_attention_heads\":" << kHeads
    << ",\"num_key_value_heads\":" << kKvHeads << ",\"head_dim\":" << kHeadDim << ",\"vocab_size\":" << kVocab
    << ",\"max_position_embeddings\":4096,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true";
  if (moe) {
    f << ",\"num_experts\":" << kExperts << ",\"num_experts_per_tok\":" << kTopK
      << ",\"moe_intermediate_size\":" << kExpertWidth << ",\"norm_topk_prob\":true";
  }
  f << "}";
  return dir;
}

double ms_per_token(const std::filesystem::path& dir, int steps, int threads, const std::string& device) {
  ModelRunnerOptions o;
  o.device = device;
  o.model_dir = dir;
  o.load.load_format = "dummy";
  o.load.dtype = "bfloat16";
  o.threads = threads;
  o.num_blocks = 64;
  ModelRunner runner(o);
  std::vector<int32_t> prompt(16);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(100 + 7 * i);
  runner.execute(make_single_sequence_batch(prompt, 0, runner.block_size()));
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    const int32_t tok[] = {static_cast<int32_t>(200 + s)};
    runner.execute(make_single_sequence_batch(tok, 16 + s, runner.block_size()));
  }
  runner.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
}

}  // namespace

namespace {
int run(int argc, char** argv);
}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_moe_decode: %s\n", e.what());
    return 1;
  }
}

namespace {

int run(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 4;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 32;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::string device = argc > 4 ? argv[4] : "cpu";
  if (layers < 1 || steps < 1 || threads < 1 || (device != "cpu" && device != "cuda")) {
    std::fprintf(stderr, "usage: bench_moe_decode [layers >= 1] [steps >= 1] [threads >= 1] [cpu|cuda]\n");
    return 2;
  }
  const double attn = 4.0 * kHidden * kHeads * kHeadDim / 2 * 1.25;  // q, o full; k, v at 4 of 16 heads
  const double mlp_unit = 3.0 * kHidden;                             // gate, up, down per unit of width
  struct Case {
    const char* label;
    bool moe;
    int64_t width;
    double active, total;
  } cases[] = {
      {"qwen3-moe 64 experts top-8", true, kExpertWidth, mlp_unit * kTopK * kExpertWidth,
       mlp_unit * kExperts * kExpertWidth},
      {"dense, active width", false, int64_t{kTopK} * kExpertWidth, mlp_unit * kTopK * kExpertWidth,
       mlp_unit * kTopK * kExpertWidth},
      {"dense, total width", false, int64_t{kExperts} * kExpertWidth, mlp_unit * kExperts * kExpertWidth,
       mlp_unit * kExperts * kExpertWidth},
  };
  std::printf("%d layers, hidden %d, bf16 weights, %s, %d threads, %d decode steps\n", layers, kHidden,
              device.c_str(), threads, steps);
  for (const Case& c : cases) {
    const auto dir = write_config(c.moe ? "moe" : std::to_string(c.width), layers, c.moe, c.width);
    const double ms = ms_per_token(dir, steps, threads, device);
    std::printf("%-28s params (layers) active %6.1fM total %6.1fM  %8.2f ms/token\n", c.label,
                (attn + c.active) * layers / 1e6, (attn + c.total) * layers / 1e6, ms);
    std::filesystem::remove_all(dir);
  }
  return 0;
}

}  // namespace
