// bench_cuda_decode: the CUDA backend on a Llama-3-8B-shaped model with dummy bf16 weights
// (tests/fixtures/configs/llama3-8b). Prints the device copy bandwidth (a cudaMemcpy D2D probe),
// the bandwidth floor of batch-1 decode (weight bytes read per token / bandwidth), batch-1 decode
// tokens/s and its fraction of that floor, and prefill tokens/s for one 1024-token prompt.
// Each step goes through ModelRunner::execute (uploads, forward, logits download), as in the engine.
// Usage: bench_cuda_decode [config_dir] [prompt_len] [decode_steps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/bench/cuda_bench.h"

#ifdef CYPRIS_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/backend/backend_factory.h"
#include "engine/runtime/model_runner.h"
#endif

CYPRIS_CUDA_BENCH_STUB_MAIN("bench_cuda_decode")
#ifdef CYPRIS_HAVE_CUDA

using namespace cypris;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Device-to-device copy bandwidth (bytes read + bytes written per second), best of several runs.
double probe_bandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0.0;
  cudaMemset(a, 1, bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best_ms = 1e30f;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i > 0 && ms < best_ms) best_ms = ms;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (best_ms / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_cuda_decode: no CUDA device found (no GPU or no driver); nothing to measure\n");
    return 2;
  }
  const std::string dir = argc > 1 ? argv[1] : std::string(CYPRIS_SOURCE_DIR) + "/tests/fixtures/configs/llama3-8b";
  const int prompt_len = argc > 2 ? std::atoi(argv[2]) : 1024;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 128;
  try {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    const double bw = probe_bandwidth();
    std::printf("device: %s, copy bandwidth %.0f GB/s\n", prop.name, bw / 1e9);

    ModelRunnerOptions o;
    o.model_dir = dir;
    o.load.load_format = "dummy";
    o.load.dtype = "bfloat16";
    o.load.overrides.max_model_len = prompt_len + steps + 16;
    o.device = "cuda";
    o.block_size = 16;
    o.num_blocks = (prompt_len + steps + 16 + 15) / 16 + 1;
    const auto t_load = std::chrono::steady_clock::now();
    ModelRunner runner(o);
    std::printf("loaded dummy weights in %.1f s\n", seconds_since(t_load));

    const ModelConfig& c = runner.config();
    const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.num_attention_heads) * c.head_dim;
    const double kv = static_cast<double>(c.num_key_value_heads) * c.head_dim, inter = c.intermediate_size;
    // Weights every decode step reads in full: all linear layers and the LM head (the embedding
    // table is only indexed). 2 bytes each in bf16.
    const double weight_bytes =
        2.0 * (c.num_hidden_layers * (h * (q + 2 * kv) + q * h + 2 * h * inter + inter * h) + c.vocab_size * h);
    const double floor_s = weight_bytes / bw;
    std::printf("weights read per decode step: %.2f GB; bandwidth floor %.2f ms/token = %.1f tokens/s\n",
                weight_bytes / 1e9, floor_s * 1e3, 1.0 / floor_s);

    std::vector<int32_t> prompt(prompt_len);
    for (int i = 0; i < prompt_len; ++i) prompt[i] = 1000 + (i * 7919) % 100000;
    runner.execute(make_single_sequence_batch(prompt, 0, o.block_size));  // warm-up (cuBLAS heuristics, pool)
    double best_prefill = 1e30;
    for (int r = 0; r < 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      runner.execute(make_single_sequence_batch(prompt, 0, o.block_size));
      best_prefill = std::min(best_prefill, seconds_since(t0));
    }
    std::printf("prefill: %d tokens in %.1f ms = %.0f tokens/s\n", prompt_len, best_prefill * 1e3,
                prompt_len / best_prefill);

    int32_t tok = 1234;
    for (int i = 0; i < 3; ++i) {  // warm-up decode
      const int32_t one[] = {tok};
      runner.execute(make_single_sequence_batch(one, prompt_len + i, o.block_size));
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      const int32_t one[] = {tok};
      Logits l = runner.execute(make_single_sequence_batch(one, prompt_len + i, o.block_size));
      tok = static_cast<int32_t>(std::max_element(l.data.begin(), l.data.end()) - l.data.begin());
    }
    const double per_token = seconds_since(t0) / steps;
    std::printf("decode (batch 1, context %d..%d): %.2f ms/token = %.1f tokens/s = %.1f%% of the bandwidth floor\n",
                prompt_len, prompt_len + steps, per_token * 1e3, 1.0 / per_token, 100.0 * floor_s / per_token);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
#endif
