// bench_cuda_sampling: the GPU sampler (kernels/cuda/sampling.h) on 256 rows x 128k vocabulary
// with top_p + min_p + penalties (+ top-k 50 and logprobs 5 on half the rows), ms per step (CUDA
// events, mean of the timed runs after warm-up); for scale, the time to download the same logits
// to the host, which the CPU path pays before its sampler starts.
// Usage: bench_cuda_sampling [rows] [vocab] [steps]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "tests/bench/cuda_bench.h"

#ifdef CYPRIS_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling.h"
#endif

CYPRIS_CUDA_BENCH_STUB_MAIN("bench_cuda_sampling")
#ifdef CYPRIS_HAVE_CUDA

using namespace cypris;

namespace {

template <typename T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)));
  if (!v.empty()) CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const int32_t rows = argc > 1 ? std::atoi(argv[1]) : 256;
  const int32_t vocab = argc > 2 ? std::atoi(argv[2]) : 128 * 1024;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 50;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_cuda_sampling: no CUDA device\n");
    return 77;
  }
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (float& v : logits) v = nd(g);
  std::vector<SamplingRowParams> params(static_cast<size_t>(rows));
  std::vector<int32_t> hist_offsets{0}, hist_ids;
  constexpr int kHistory = 1024;  // prompt + output tokens per row
  for (int32_t r = 0; r < rows; ++r) {
    SamplingRowParams& p = params[static_cast<size_t>(r)];
    p.temperature = 0.8f;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repetition_penalty = 1.1f;
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.2f;
    p.top_k = r % 2 ? 50 : -1;
    p.num_top_logprobs = r % 2 ? 5 : 0;
    p.want_rank = r % 2;
    p.num_prompt_ids = kHistory / 2;
    p.seed = static_cast<uint64_t>(r) * 7919u;
    p.position = 100;
    for (int i = 0; i < kHistory; ++i) hist_ids.push_back(static_cast<int32_t>(g() % static_cast<uint32_t>(vocab)));
    hist_offsets.push_back(static_cast<int32_t>(hist_ids.size()));
  }
  constexpr int32_t kTop = 5;
  SamplingBatch b;
  b.logits = to_device(logits);
  b.ld = vocab;
  b.rows = rows;
  b.vocab = vocab;
  b.params = to_device(params);
  b.hist_offsets = to_device(hist_offsets);
  b.hist_ids = to_device(hist_ids);
  b.max_top = kTop;
  const size_t n = sampling_work_elements(rows, vocab);
  float* work = nullptr;
  int32_t* counts = nullptr;
  CUDA_CHECK(cudaMalloc(&work, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&counts, n * sizeof(int32_t)));
  CUDA_CHECK(cudaMemset(counts, 0, n * sizeof(int32_t)));
  SamplingResults out;
  CUDA_CHECK(cudaMalloc(&out.tokens, rows * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&out.ranks, rows * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&out.logprobs, rows * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&out.top_ids, static_cast<size_t>(rows) * kTop * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&out.top_logprobs, static_cast<size_t>(rows) * kTop * sizeof(float)));
  cudaEvent_t t0, t1;
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t1));
  for (int i = 0; i < 3; ++i) sample_rows_cuda(b, out, work, counts, nullptr);
  CUDA_CHECK(cudaEventRecord(t0));
  for (int i = 0; i < steps; ++i) sample_rows_cuda(b, out, work, counts, nullptr);
  CUDA_CHECK(cudaEventRecord(t1));
  CUDA_CHECK(cudaEventSynchronize(t1));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
  std::vector<float> host(logits.size());
  CUDA_CHECK(cudaEventRecord(t0));
  CUDA_CHECK(cudaMemcpy(host.data(), b.logits, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaEventRecord(t1));
  CUDA_CHECK(cudaEventSynchronize(t1));
  float dl_ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&dl_ms, t0, t1));
  std::printf("bench_cuda_sampling: %d rows x %d vocab, top_p 0.95 + min_p 0.05 + penalties (%d history ids/row)\n",
              rows, vocab, kHistory);
  std::printf("  GPU sampler: %.3f ms/step (mean of %d)\n", ms / steps, steps);
  std::printf("  for scale, logits download (CPU path): %.3f ms\n", dl_ms);
  return 0;
}
#endif
