// bench_lora_decode: the cost of LoRA in a decode step. A Llama-shaped model with dummy weights
// decodes a batch of 8 sequences (64 tokens of context each) once on the base model and once with
// the 8 rows spread over 4 different adapters of rank 16 on every attention and MLP projection
// (q/k/v/o/gate/up/down, random A and B). Prints the median step time of each, their ratio, and
// the adapters' memory: their own bytes against what the model's adapter slots hold.
// Usage: bench_lora_decode [hidden] [layers] [steps] [threads] [cpu|cuda] [MODEL]
// MODEL: a model file or folder to use instead of the dummy bf16 Llama (e.g. a GGUF Q4_0 file that
// bench_make_gguf wrote; hidden and layers are then the file's).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/loader/lora_adapter.h"
#include "engine/runtime/model_runner.h"

using namespace cypris;

namespace {

constexpr int kRows = 8, kAdapters = 4, kRank = 16, kContext = 64;

std::filesystem::path write_config(int hidden, int layers) {
  const auto dir = std::filesystem::temp_directory_path() / "cypris_bench_lora";
  std::filesystem::create_directories(dir);
  std::ofstream f(dir / "config.json");
  f << "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":" << hidden
    << ",\"intermediate_size\":" << hidden * 8 / 3 / 64 * 64 << ",\"num_hidden_layers\":" << layers
    << ",\"num_attention_heads\":" << hidden / 64 << ",\"num_key_value_heads\":" << std::max(1, hidden / 256)
    << ",\"vocab_size\":32000,\"max_position_embeddings\":4096,\"rms_norm_eps\":1e-5,\"tie_word_embeddings\":true}";
  return dir;
}

LoraAdapter random_adapter(const ModelConfig& cfg, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  auto mat = [&](int64_t rows, int64_t cols) {
    HostTensor t;
    t.shape = {rows, cols};
    t.buffer = Buffer(static_cast<size_t>(rows * cols) * sizeof(float));
    float* p = reinterpret_cast<float*>(t.buffer.data());
    for (int64_t i = 0; i < rows * cols; ++i) p[i] = nd(rng);
    return t;
  };
  LoraAdapter a;
  a.path = "random-" + std::to_string(seed);
  a.rank = kRank;
  a.alpha = 32;
  a.scale = lora_scale(a.alpha, a.rank, false);
  const int64_t h = cfg.hidden_size, d = cfg.head_dim, q = int64_t{cfg.num_attention_heads} * d,
                kv = int64_t{cfg.num_key_value_heads} * d, inter = cfg.intermediate_size;
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::vector<std::tuple<std::string, int64_t, int64_t>> mods = {
        {"self_attn.q_proj", q, h}, {"self_attn.k_proj", kv, h},     {"self_attn.v_proj", kv, h},
        {"self_attn.o_proj", h, q}, {"mlp.gate_proj", inter, h},     {"mlp.up_proj", inter, h},
        {"mlp.down_proj", h, inter}};
    for (const auto& [name, out, in] : mods) a.modules[p + name] = LoraModule{mat(kRank, in), mat(out, kRank)};
  }
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

struct StepTime {
  double wall = 0, cpu = 0;  // medians, ms; cpu: the process's CPU time (all threads)
};

// Median wall and CPU ms of a decode step of kRows sequences; slots per row (empty: no LoRA in the
// batch). On a machine shared with other work the CPU time is the steadier measure of the work done
// (run with CYPRIS_POOL_SPIN_US=0 so that idle pool threads sleep instead of spinning).
StepTime step_ms(ModelRunner& runner, const std::vector<int32_t>& slots, int steps) {
  const int bs = runner.block_size();
  const int blocks_per_seq = (kContext + steps + 2 + bs - 1) / bs;
  // Prefill each sequence's context (its own blocks).
  BatchContext pre;
  pre.query_start_loc.push_back(0);
  pre.max_blocks_per_seq = blocks_per_seq;
  for (int s = 0; s < kRows; ++s) {
    for (int p = 0; p < kContext; ++p) {
      pre.token_ids.push_back(100 + (s * 31 + p * 7) % 30000);
      pre.positions.push_back(p);
      pre.slot_mapping.push_back(int64_t{s * blocks_per_seq + p / bs} * bs + p % bs);
      if (!slots.empty()) pre.lora_slots.push_back(slots[size_t(s)]);
    }
    pre.query_start_loc.push_back(static_cast<int32_t>(pre.token_ids.size()));
    pre.seq_lens.push_back(kContext);
    for (int b = 0; b < blocks_per_seq; ++b) pre.block_tables.push_back(s * blocks_per_seq + b);
    pre.logits_indices.push_back(static_cast<int32_t>(pre.token_ids.size()) - 1);
  }
  pre.max_query_len = kContext;
  pre.max_seq_len = kContext;
  runner.execute_step(pre);
  std::vector<double> times, cpu;
  for (int step = 0; step < steps; ++step) {
    BatchContext d = pre;
    d.token_ids.clear();
    d.positions.clear();
    d.slot_mapping.clear();
    d.lora_slots.clear();
    d.query_start_loc = {0};
    d.seq_lens.clear();
    d.logits_indices.clear();
    const int pos = kContext + step;
    for (int s = 0; s < kRows; ++s) {
      d.token_ids.push_back(200 + s + step);
      d.positions.push_back(pos);
      d.slot_mapping.push_back(int64_t{s * blocks_per_seq + pos / bs} * bs + pos % bs);
      if (!slots.empty()) d.lora_slots.push_back(slots[size_t(s)]);
      d.query_start_loc.push_back(s + 1);
      d.seq_lens.push_back(pos + 1);
      d.logits_indices.push_back(s);
    }
    d.max_query_len = 1;
    d.max_seq_len = pos + 1;
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_ms();
    runner.execute_step(d);
    runner.synchronize();
    cpu.push_back(cpu_ms() - c0);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return {median(times), median(cpu)};
}

int run(int argc, char** argv) {
  const int hidden = argc > 1 ? std::atoi(argv[1]) : 2048;
  const int layers = argc > 2 ? std::atoi(argv[2]) : 4;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 40;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  const std::string device = argc > 5 ? argv[5] : "cpu";
  const std::string model = argc > 6 ? argv[6] : "";
  ModelRunnerOptions o;
  o.device = device;
  if (model.empty()) {
    o.model_dir = write_config(hidden, layers);
    o.load.load_format = "dummy";
    o.load.dtype = "bfloat16";
  } else {
    o.model_dir = model;  // its own weights; activations in the default dtype for them
  }
  o.threads = threads;
  o.num_blocks = kRows * ((kContext + steps + 2 + 15) / 16) + 1;
  o.max_loras = kAdapters;
  o.max_lora_rank = kRank;
  ModelRunner runner(o);
  size_t own = 0;
  for (int i = 0; i < kAdapters; ++i) {
    const LoraAdapter a = random_adapter(runner.config(), 11 + static_cast<uint32_t>(i));
    own += a.nbytes();
    runner.load_lora(i, a);
  }
  std::vector<int32_t> spread;
  for (int s = 0; s < kRows; ++s) spread.push_back(s % kAdapters);
  // Alternating runs so that drift in the machine's load hits both alike.
  std::vector<double> base, lora, base_cpu, lora_cpu;
  for (int round = 0; round < 3; ++round) {
    const StepTime tb = step_ms(runner, {}, steps);
    const StepTime tl = step_ms(runner, spread, steps);
    base.push_back(tb.wall);
    lora.push_back(tl.wall);
    base_cpu.push_back(tb.cpu);
    lora_cpu.push_back(tl.cpu);
  }
  const double b = median(base), l = median(lora), bc = median(base_cpu), lc = median(lora_cpu);
  const ModelConfig& mc = runner.config();
  std::printf("model: %s, hidden %lld, %lld layers, %s, %d threads\n",
              model.empty() ? "dummy bf16 Llama" : model.c_str(), static_cast<long long>(mc.hidden_size),
              static_cast<long long>(mc.num_hidden_layers), device.c_str(), threads);
  std::printf("decode step, %d rows x %d context: base %.3f ms, with %d rank-%d adapters %.3f ms, ratio %.3f\n",
              kRows, kContext, b, kAdapters, kRank, l, l / b);
  std::printf("CPU time per step (all threads): base %.3f ms, with adapters %.3f ms, ratio %.3f\n", bc, lc, lc / bc);
  std::printf("adapter memory: own %.2f MiB (fp32), adapter slots on the device %.2f MiB\n",
              static_cast<double>(own) / (1 << 20), static_cast<double>(runner.lora_device_bytes()) / (1 << 20));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_lora_decode: %s\n", e.what());
    return 1;
  }
}
