// Shared by the CUDA benchmarks (tests/bench/cuda_*.cpp): in a build without the CUDA backend each
// one is a main that says how to get one and exits 2.
#pragma once

#include <cstdio>

#ifdef CYPRIS_HAVE_CUDA
#define CYPRIS_CUDA_BENCH_STUB_MAIN(name)
#else
#define CYPRIS_CUDA_BENCH_STUB_MAIN(name)                                                                 \
  int main() {                                                                                          \
    std::fprintf(stderr, "%s: this build has no CUDA backend (configure with -DCYPRIS_CUDA=ON)\n", name); \
    return 2;                                                                                           \
  }
#endif
