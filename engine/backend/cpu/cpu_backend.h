// The CPU backend: host memory (activations from a caching pool, host_pool.h), the kernels of
// kernels/cpu/ and a thread pool of --threads.
#pragma once

#include <memory>

#include "engine/backend/backend.h"

namespace cypris {

class ThreadPool;
class HostBlockPool;

class CpuBackend : public Backend {
 public:
  // threads <= 0: one per hardware thread.
  explicit CpuBackend(int threads = 0);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::Cpu; }
  int threads() const;

  DeviceTensor empty(DType dtype, const std::vector<int64_t>& shape) override;
  DeviceTensor zeros(DType dtype, const std::vector<int64_t>& shape) override;
  DeviceTensor upload(const void* data, DType dtype, const std::vector<int64_t>& shape) override;
  DeviceTensor upload_weight(HostTensor&& host) override;
  std::optional<DeviceTensor> dummy_weight(DType dtype, const std::vector<int64_t>& shape,
                                           const std::vector<DummyFill>& runs) override;
  void download(const Tensor& t, void* dst) override;
  void upload_into(const void* src, Tensor& dst) override;
  DeviceTensor empty_host(DType dtype, const std::vector<int64_t>& shape) override { return empty(dtype, shape); }
  void synchronize() override {}
  DeviceMemoryInfo memory_info() override { return {}; }

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  void grouped_linear(const Tensor& x, const std::vector<LinearGroup>& groups, Tensor& out) override;
  void lora_linear(const Tensor& x, const Tensor& slots, const Tensor& a, const Tensor& b, const Tensor& scales,
                   Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) override;
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor* bias, float eps, Tensor& out) override;
  void rotary(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos_sin, int head_dim) override;
  void write_kv_cache(const Tensor& k, const Tensor& v, const AttentionMetadata& meta, Tensor& k_cache,
                      Tensor& v_cache, const KvCacheScales& kv_scales = {}) override;
  void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMetadata& meta,
                       float scale, int sliding_window, Tensor& out, const KvCacheScales& kv_scales = {},
                       float softcap = 0.0f) override;
  void silu_and_mul(const Tensor& x, Tensor& out) override;
  void gelu_tanh_and_mul(const Tensor& x, Tensor& out) override;
  void rms_norm_heads(Tensor& x, const Tensor& w, float eps) override;
  void layer_norm_heads(Tensor& x, const Tensor& w, float eps) override;
  void scale_and_cap(Tensor& x, float scale, float cap) override;
  void gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) override;
  void scatter_add_rows(const Tensor& src, const Tensor& indices, const Tensor& weights, Tensor& out) override;
  void add(const Tensor& x, Tensor& out) override;
  void sample_rows(const Tensor& logits, const SamplingBatch& batch, const SamplingResults& out) override;
  void copy_blocks(const std::vector<Tensor>& caches, const std::vector<int64_t>& src_dst) override;
  void swap_blocks(const Tensor& src, Tensor& dst, const std::vector<int64_t>& src_dst) override;
  void move_kv_slots(Tensor& k_cache, Tensor& v_cache, const std::vector<int64_t>& src_dst,
                     const std::vector<float>& cos_sin, int rot_dim, const KvCacheScales& kv_scales) override;

 private:
  std::unique_ptr<ThreadPool> pool_;
  std::shared_ptr<HostBlockPool> memory_;  // activation buffers (and the KV cache, which is allocated once)
};

}  // namespace cypris
