// Helpers for the GPU tests: skip without a GPU, device buffers filled from / read into host
// vectors, poisoning, the normalised error used against the CPU references, and paged attention run
// on the GPU over the CPU reference's inputs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#ifdef CYPRIS_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/common/dtype.h"
#include "engine/backend/backend_factory.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"  // convert_from_f32 / convert_to_f32
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_attention.h"
#include "tests/support/attention_cases.h"
#endif

// Skips the test on a machine without a usable GPU (an error from the driver counts as none).
#ifdef CYPRIS_HAVE_CUDA
#define CYPRIS_REQUIRE_GPU()                                                        \
  do {                                                                              \
    if (::cypris::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found"; \
  } while (0)
#else
#define CYPRIS_REQUIRE_GPU() GTEST_SKIP() << "built without the CUDA backend"
#endif

// A GPU test file's tests sit in `#ifdef CYPRIS_HAVE_CUDA`; without the backend the file is this one
// test, `suite.SkippedWithoutCuda`, which reports the skip.
#ifdef CYPRIS_HAVE_CUDA
#define CYPRIS_SKIPPED_WITHOUT_CUDA(suite)
#else
#define CYPRIS_SKIPPED_WITHOUT_CUDA(suite) \
  TEST(suite, SkippedWithoutCuda) { CYPRIS_REQUIRE_GPU(); }
#endif

namespace cypris::gpu_test {

// The tiny model fixtures (tests/fixtures/models/*/config.json), sorted, for parameterised tests.
inline std::vector<std::string> fixture_dirs() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(CYPRIS_FIXTURES_DIR) + "/models")) {
    if (std::filesystem::exists(e.path() / "config.json")) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// max |got - ref| / max |ref|; NaN anywhere (an unwritten poisoned output) gives infinity.
inline double norm_err(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double diff = 0, mag = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(ref[i])) return INFINITY;
    if (std::isnan(ref[i])) continue;
    diff = std::max(diff, static_cast<double>(std::abs(got[i] - ref[i])));
    mag = std::max(mag, static_cast<double>(std::abs(ref[i])));
  }
  return diff / mag;
}

#ifdef CYPRIS_HAVE_CUDA
// Stores fp32 values in `dtype` (F32/F16/BF16, round to nearest even) and returns the raw bytes plus
// the values actually stored.
struct Stored {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

inline Stored store(const std::vector<float>& v, DType dtype) {
  Stored s;
  s.bytes.resize(v.size() * dtype_size(dtype));
  convert_from_f32(v.data(), dtype, s.bytes.data(), static_cast<int64_t>(v.size()));
  s.values.resize(v.size());
  convert_to_f32(s.bytes.data(), dtype, s.values.data(), static_cast<int64_t>(v.size()));
  return s;
}

// Raw F32/F16/BF16 device bytes back to fp32.
inline std::vector<float> to_f32(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<float> out(bytes.size() / dtype_size(dtype));
  convert_to_f32(bytes.data(), dtype, out.data(), static_cast<int64_t>(out.size()));
  return out;
}

// A device copy of a host vector that frees itself.
template <typename T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n) { CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit DevBuf(const std::vector<T>& host) : DevBuf(host.size()) { upload(host); }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  T* get() const { return static_cast<T*>(p_); }
  void upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  // All bits set: NaN for float, -1 for integers.
  void poison() { CUDA_CHECK(cudaMemset(p_, 0xff, n_ * sizeof(T))); }
  std::vector<T> download() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n_);
    CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// The CPU reference for paged attention over batch `b`: completes `p` (whose q, ldq, caches and cache
// format are set) with the batch, scale 1/sqrt(head_dim), `window` and an output of
// [num_tokens, num_heads * head_dim], runs paged_attention_cpu and returns that output.
inline std::vector<float> paged_attention_reference(PagedAttentionParams& p, const testing_support::PagedBatch& b,
                                                    int window) {
  testing_support::set_paged_batch(p, b);
  p.scale = 1.0f / std::sqrt(static_cast<float>(b.head_dim));
  p.sliding_window = window;
  std::vector<float> ref(b.num_tokens * b.q_row());
  p.out = ref.data();
  p.ldo = b.q_row();
  paged_attention_cpu(p, nullptr);
  return ref;
}

// paged_attention_cuda over device copies of the host inputs of `p` (the CPU reference's parameters
// for batch `b`, q in fp32), the output poisoned first; returns the output as fp32, [num_tokens, ldo].
// io: the element type q and out have on the GPU (q is converted to it; pass values it represents
// exactly to compare with the reference). Without hints the kernel gets no host-side length bounds and
// derives them.
inline std::vector<float> paged_attention_on_gpu(const PagedAttentionParams& p, const testing_support::PagedBatch& b,
                                                 bool hints = true, DType io = DType::F32) {
  const auto bytes = [](const void* host, size_t n) {
    const auto* u = static_cast<const uint8_t*>(host);
    return std::vector<uint8_t>(u, u + n);
  };
  const size_t cache_bytes = static_cast<size_t>(b.num_slots() * b.kv_row()) * dtype_size(p.cache_dtype);
  const size_t q_elems = static_cast<size_t>(b.num_tokens * p.ldq), out_elems = static_cast<size_t>(b.num_tokens * p.ldo);
  std::vector<uint8_t> q_io(q_elems * dtype_size(io));
  convert_from_f32(static_cast<const float*>(p.q), io, q_io.data(), static_cast<int64_t>(q_elems));
  DevBuf<uint8_t> dq(q_io), dout(out_elems * dtype_size(io));
  DevBuf<uint8_t> dk(bytes(p.k_cache, cache_bytes)), dv(bytes(p.v_cache, cache_bytes));
  DevBuf<int32_t> dqsl(b.query_start_loc), dlens(b.seq_lens), dtables(b.block_tables);
  PagedAttentionCudaParams g;
  g.q = dq.get();
  g.ldq = p.ldq;
  g.io_dtype = io;
  g.k_cache = dk.get();
  g.v_cache = dv.get();
  g.cache_dtype = p.cache_dtype;
  g.k_scale = p.k_scale;
  g.v_scale = p.v_scale;
  testing_support::set_paged_batch(g, b, dqsl.get(), dlens.get(), dtables.get());
  if (!hints) g.max_query_len = g.max_seq_len = 0;
  g.scale = p.scale;
  g.sliding_window = p.sliding_window;
  g.softcap = p.softcap;
  g.out = dout.get();
  g.ldo = p.ldo;
  const size_t ws = paged_attention_workspace_bytes(g);
  DevBuf<uint8_t> workspace(ws);
  dout.poison();  // all bits set: NaN in fp32, bf16 and fp16
  paged_attention_cuda(g, ws ? workspace.get() : nullptr, nullptr);
  const std::vector<uint8_t> out_io = dout.download();
  std::vector<float> out(out_elems);
  convert_to_f32(out_io.data(), io, out.data(), static_cast<int64_t>(out_elems));
  return out;
}
#endif

}  // namespace cypris::gpu_test
