// CPU decode attention at long contexts, per KV cache type and instruction-set path: one query token
// against a context of N cached tokens in each of L layers' caches (the layers' caches are visited in
// turn, so together they do not fit in the CPU's caches, as in a real decode step), the ~110M Llama's
// attention shape by default (12 heads, 12 KV heads, head_dim 64). Prints ms per decode step (all
// layers: the fastest of 5, wall clock and, with one thread, the thread's CPU time, which a machine
// shared with other work inflates less) and the K/V bytes read per CPU second. Paths the CPU lacks
// are skipped.
// Usage: bench_attention_decode [context=2048] [threads=1] [layers=12] [heads=12] [kv_heads=12] [head_dim=64]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/common/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/thread_pool.h"

int main(int argc, char** argv) {
  using namespace cypris;
  const int ctx = argc > 1 ? std::atoi(argv[1]) : 2048;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int layers = argc > 3 ? std::atoi(argv[3]) : 12;
  const int heads = argc > 4 ? std::atoi(argv[4]) : 12;
  const int kv_heads = argc > 5 ? std::atoi(argv[5]) : 12;
  const int d = argc > 6 ? std::atoi(argv[6]) : 64;
  if (ctx < 1 || threads < 1 || layers < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || d < 1) {
    std::fprintf(stderr, "bench_attention_decode: bad arguments (see the usage line in the source)\n");
    return 2;
  }
  const int block = 16;
  const int blocks = (ctx + block - 1) / block;
  const int64_t kv_w = int64_t{kv_heads} * d, slots = int64_t{blocks} * block;
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = (b * 7919) % blocks;  // scattered blocks
  const int32_t qsl[2] = {0, 1}, lens[1] = {ctx};
  std::mt19937 g(1);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> src(slots * kv_w);
  for (float& x : src) x = n(g);
  std::vector<float> q(int64_t{heads} * d), out(q.size());
  for (float& x : q) x = n(g);
  std::vector<int64_t> slot_ids(slots);
  for (int64_t i = 0; i < slots; ++i) slot_ids[i] = i;
  ThreadPool pool(threads);
  ThreadPool* pool_ptr = threads > 1 ? &pool : nullptr;  // one thread: this one, so its CPU time is the work's
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  std::printf("context %d, %d layers, %d heads / %d KV heads, head_dim %d, %d thread(s)\n", ctx, layers, heads,
              kv_heads, d, threads);
  std::printf(
      "| cache | path | ms per decode step (wall) | CPU ms (1 thread) | K/V GB/s per CPU second "
      "|\n|---|---|---|---|---|\n");
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
    const size_t elem = dtype_size(dt);
    std::vector<std::vector<uint8_t>> kc(layers), vc(layers);
    for (int l = 0; l < layers; ++l) {
      kc[l].resize(slots * kv_w * elem);
      vc[l].resize(slots * kv_w * elem);
      write_kv_cache_cpu(src.data(), kv_w, src.data(), kv_w, slots, slot_ids.data(), kv_w, kc[l].data(), vc[l].data(),
                         slots, dt, 0.05f, 0.05f);
    }
    for (CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Scalar}) {
      if (!cpu_has_isa(isa)) continue;
      PagedAttentionParams p;
      p.q = q.data();
      p.ldq = heads * d;
      p.cache_dtype = dt;
      p.k_scale = p.v_scale = 0.05f;
      p.num_blocks = blocks;
      p.block_size = block;
      p.num_heads = heads;
      p.num_kv_heads = kv_heads;
      p.head_dim = d;
      p.query_start_loc = qsl;
      p.seq_lens = lens;
      p.block_tables = table.data();
      p.max_blocks_per_seq = blocks;
      p.num_seqs = 1;
      p.scale = 0.125f;
      p.out = out.data();
      p.ldo = heads * d;
      p.isa = isa;
      auto step = [&] {
        for (int l = 0; l < layers; ++l) {
          p.k_cache = kc[l].data();
          p.v_cache = vc[l].data();
          paged_attention_cpu(p, pool_ptr);
        }
      };
      step();  // warm-up
      const int reps = 5;
      double best = 1e30, best_cpu = 1e30;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = cpu_now();
        step();
        best_cpu = std::min(best_cpu, cpu_now() - c0);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      const double cpu = threads > 1 ? best : best_cpu;
      const double bytes = 2.0 * layers * ctx * kv_w * static_cast<double>(elem);
      std::printf("| %s | %s | %.2f | %.2f | %.1f |\n", std::string(dtype_name(dt)).c_str(), cpu_isa_name(isa),
                  best * 1e3, cpu * 1e3, bytes / cpu / 1e9);
    }
  }
  return 0;
}
