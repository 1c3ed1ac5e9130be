// bench_quant_matmul: the CPU linear layer y = x · Wᵀ with weights in Q4_K, Q8_0, Q6_K, F16 and BF16
// at the shapes of a 110M-parameter Llama (hidden 768, ffn 2048, vocab 32000) and of a 7B one
// (4096 x 4096, 11008 x 4096, 4096 x 11008), for decode (m = 1) and prefill (m = 128), on 1 and 2
// threads. Prints ms per call, GB/s of weight bytes read and tokens/s (m / time) per shape, then
// the matmul-only decode and prefill rate of the whole 110M model (12 layers of q, k, v, o, gate,
// up, down, plus the vocabulary projection), the figure to hold against llama.cpp's tokens/s.
// Weights are random (quantized types: random bytes with valid fp16 scales); speed does not
// depend on the values.
// On a machine shared with other jobs, --cpu-time derives the rates from the process CPU time
// divided by the thread count instead of wall time (the wall time is printed as well); it also
// stops the pool's idle polling (CYPRIS_POOL_SPIN_US=0), so CPU time counts work only.
// --rows 1,16,128 times those activation-row counts (default 1,128; the model sums use 1 and 128).
// Usage: bench_quant_matmul [--threads N] [--types Q4_K,Q8_0,F16,W4G128] [--rows 1,128] [--quick] [--cpu-time]
// (W4G32/W4G128/W8G32/W8G128: the GPTQ/AWQ/compressed-tensors repacked types; F8G128: FP8 weights;
// NF4G64/FP4G64: bitsandbytes 4-bit weights)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant/quant_gemm.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "kernels/cpu/thread_pool.h"

using namespace cypris;

namespace {

struct Shape {
  const char* name;
  int64_t n, k;
  int count;  // how many times a 110M forward uses it per token (0: 7B shapes, not in the model sum)
};

const Shape kShapes[] = {
    {"110M qkvo 768x768", 768, 768, 12 * 4}, {"110M gate/up 2048x768", 2048, 768, 12 * 2},
    {"110M down 768x2048", 768, 2048, 12},   {"110M vocab 32000x768", 32000, 768, 1},
    {"7B 4096x4096", 4096, 4096, 0},         {"7B 11008x4096", 11008, 4096, 0},
    {"7B 4096x11008", 4096, 11008, 0},
};

std::vector<uint8_t> make_weights(DType t, int64_t n, int64_t k) {
  std::mt19937 g(1);
  std::vector<uint8_t> w(dtype_nbytes(t, n * k));
  if (!dtype_is_quantized(t)) {
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::vector<float> f(static_cast<size_t>(n * k));
    for (auto& v : f) v = d(g);
    convert_from_f32(f.data(), t, w.data(), n * k);
    return w;
  }
  for (auto& b : w) b = static_cast<uint8_t>(g());
  // Every quantized block of these types starts (Q8_0) or ends (Q6_K) with fp16 scales, or has
  // them at a fixed place (Q4_K: d, dmin first): give them a sane value.
  const int bb = quant::block_bytes(t);
  const uint16_t h = f32_to_f16(0.01f);
  for (size_t off = 0; off < w.size(); off += bb) {
    uint8_t* p = w.data() + off;
    if (t == DType::F8G128 || t == DType::NF4G64 || t == DType::FP4G64) {
      const float d = 0.01f;  // an fp32 scale (absmax)
      std::memcpy(p, &d, 4);
    } else if (t == DType::Q6_K) {
      std::memcpy(p + bb - 2, &h, 2);
    } else if (t == DType::Q4_K) {
      std::memcpy(p, &h, 2), std::memcpy(p + 2, &h, 2);
    } else {
      std::memcpy(p, &h, 2);
    }
  }
  return w;
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Timing {
  double wall_ms;
  double cpu_ms;  // CPU time of all threads per call (the pool sleeps when idle, it never spins)
};

Timing time_call(const std::function<void()>& fn, double min_seconds) {
  fn();  // warm caches and pool
  int reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_seconds();
  double elapsed = 0;
  do {
    fn();
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < min_seconds);
  return {elapsed * 1e3 / reps, (process_cpu_seconds() - c0) * 1e3 / reps};
}

void linear(const float* x, int64_t m, int64_t k, const std::vector<uint8_t>& w, DType t, int64_t n, float* y,
            ThreadPool* pool) {
  if (dtype_is_quantized(t)) {
    quant_gemm_xwt(x, m, k, k, w.data(), t, n, nullptr, y, n, pool);
  } else {
    gemm_xwt(x, m, k, k, w.data(), t, n, nullptr, y, n, pool);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts = {1, 2};
  std::vector<DType> types = {DType::Q4_K, DType::Q8_0, DType::Q6_K, DType::F16, DType::BF16};
  std::vector<int64_t> row_counts = {1, 128};
  bool quick = false;
  bool use_wall = true;  // --cpu-time: rates from CPU time / threads instead of wall time
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      thread_counts = {std::atoi(argv[++i])};
    } else if (a == "--cpu-time") {
      use_wall = false;
      ::setenv("CYPRIS_POOL_SPIN_US", "0", 1);  // before any pool reads it
    } else if (a == "--rows" && i + 1 < argc) {
      row_counts.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long long v = std::strtoll(p, &end, 10);
        if (end == p || v < 1 || v > 65536) {
          std::fprintf(stderr, "--rows: expected a comma-separated list of row counts 1..65536, got '%s'\n", argv[i]);
          return 2;
        }
        row_counts.push_back(v);
        p = *end == ',' ? end + 1 : end;
      }
      if (row_counts.empty()) {
        std::fprintf(stderr, "--rows: expected at least one row count\n");
        return 2;
      }
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--types" && i + 1 < argc) {
      types.clear();
      std::string list = argv[++i];
      size_t pos = 0;
      while (pos <= list.size()) {
        const size_t e = std::min(list.find(',', pos), list.size());
        const std::string name = list.substr(pos, e - pos);
        for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS, DType::F16,
                        DType::BF16, DType::F32, DType::W4G32, DType::W4G64, DType::W4G128, DType::W8G32, DType::W8G128,
                        DType::F8G128, DType::NF4G64, DType::FP4G64})
          if (dtype_name(t) == name || (name == "F16" && t == DType::F16) || (name == "BF16" && t == DType::BF16))
            types.push_back(t);
        pos = e + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_quant_matmul [--threads N] [--types Q4_K,Q8_0,F16] [--rows 1,128] [--quick] "
                   "[--cpu-time]\n");
      return 2;
    }
  }
  std::printf("quantized kernels: %s\n", quant::isa_name(quant::best_isa()));
  const double min_s = quick ? 0.05 : 0.3;
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    init_blas_single_threaded();
    for (DType t : types) {
      double model_decode_ms = 0, model_prefill_ms = 0;
      for (const Shape& s : kShapes) {
        if (quick && s.count == 0) continue;
        const auto w = make_weights(t, s.n, s.k);
        for (int64_t m : row_counts) {
          std::mt19937 g(2);
          std::normal_distribution<float> d(0.0f, 1.0f);
          std::vector<float> x(static_cast<size_t>(m * s.k)), y(static_cast<size_t>(m * s.n));
          for (auto& v : x) v = d(g);
          const Timing tm = time_call([&] { linear(x.data(), m, s.k, w, t, s.n, y.data(), &pool); }, min_s);
          // On a shared machine the wall time includes waiting for a core: cpu/threads is what the
          // call would take with its cores to itself (a lower bound when the split is uneven).
          const double ms = use_wall ? tm.wall_ms : std::max(tm.cpu_ms / threads, 1e-6);
          const double gbs = static_cast<double>(w.size()) / (ms * 1e-3) / 1e9;
          const double gops = 2.0 * m * s.n * s.k / (ms * 1e-3) / 1e9;
          std::printf("%-8s threads=%d m=%-3lld %-24s wall %9.3f ms  cpu/thr %9.3f ms %7.2f GB/s %7.1f GOP/s %9.1f tok/s\n",
                      std::string(dtype_name(t)).c_str(), threads, static_cast<long long>(m), s.name, tm.wall_ms,
                      tm.cpu_ms / threads, gbs, gops, m / (ms * 1e-3));
          if (m == 1) model_decode_ms += ms * s.count;
          if (m == 128) model_prefill_ms += ms * s.count;
        }
      }
      std::printf("%-5s threads=%d 110M model matmuls: decode %.1f tok/s, prefill(128) %.1f tok/s\n\n",
                  std::string(dtype_name(t)).c_str(), threads, 1e3 / model_decode_ms, 128e3 / model_prefill_ms);
      std::fflush(stdout);
    }
  }
  return 0;
}
