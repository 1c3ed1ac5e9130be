// The CUDA backend: device memory from cudaMalloc (a caching pool for activations, exact
// allocations for weights and the KV cache), one non-blocking stream for all work, cuBLAS for
// the large GEMMs and the kernels of kernels/cuda/. Only compiled when the build has CUDA; the
// rest of the engine reaches it through make_backend (engine/backend/backend_factory.h). This
// header stays free of CUDA headers so that including it costs nothing.
#pragma once

#include <memory>

#include "engine/backend/backend.h"
#include "engine/backend/layer_weight_hooks.h"
#include "engine/backend/weight_offload_plan.h"

namespace cypris {

struct CudaBackendOptions {
  int device = 0;
  // Multiply 16-bit weights in fp32 for more than a few rows (the CPU backend's numerics) instead
  // of rounding activations to 16 bits for the tensor cores. For equivalence tests.
  bool fp32_gemm = false;
  // Element type of the activations (Backend::activation_dtype): F32, F16 or BF16 (the model dtype).
  DType activation_dtype = DType::F32;
  // --cpu-offload-gb: the decoder layers whose weights stay in pinned host memory and are streamed to
  // the GPU before each use (weight_streamer.h); empty: none.
  WeightOffloadPlan weight_offload;
};

class CudaBackend : public Backend, public LayerWeightHooks {
 public:
  // Throws Error when the device cannot be used (no driver, no such device).
  explicit CudaBackend(const CudaBackendOptions& options = {});
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device::Cuda; }
  DType activation_dtype() const override;
  // Every GGUF block type: kernels/cuda/quant (fused GEMV for decode, fp16 tiles for prefill).
  bool supports_quantized_weight(DType type) const override { return dtype_is_quantized(type); }

  DeviceTensor empty(DType dtype, const std::vector<int64_t>& shape) override;
  DeviceTensor zeros(DType dtype, const std::vector<int64_t>& shape) override;
  DeviceTensor upload(const void* data, DType dtype, const std::vector<int64_t>& shape) override;
  DeviceTensor upload_weight(HostTensor&& host) override;
  std::optional<DeviceTensor> dummy_weight(DType dtype, const std::vector<int64_t>& shape,
                                           const std::vector<DummyFill>& runs) override;
  void download(const Tensor& t, void* dst) override;
  void upload_into(const void* src, Tensor& dst) override;
  DeviceTensor empty_host(DType dtype, const std::vector<int64_t>& shape) override;
  void synchronize() override;
  DeviceMemoryInfo memory_info() override;

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  // Decode-sized groups: one grouped GEMV launch (16-bit or quantized weights); larger groups of
  // 16-bit weights: one cuBLAS grouped GEMM; otherwise linear() per group. Never ran on a GPU.
  void grouped_linear(const Tensor& x, const std::vector<LinearGroup>& groups, Tensor& out) override;
  // One launch (kernels/cuda/lora.h); the slots are read on the device, checked by the caller
  // (LoraSites::bind). Never ran on a GPU.
  void lora_linear(const Tensor& x, const Tensor& slots, const Tensor& a, const Tensor& b, const Tensor& scales,
                   Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) override;
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor* bias, float eps, Tensor& out) override;
  void rotary(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos_sin, int head_dim) override;
  void write_kv_cache(const Tensor& k, const Tensor& v, const AttentionMetadata& meta, Tensor& k_cache,
                      Tensor& v_cache, const KvCacheScales& kv_scales = {}) override;
  // One launch (kernels/cuda/cache_ops.h rotary_and_cache_cuda). Never ran on a GPU.
  void rotary_and_write_kv_cache(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& cos_sin,
                                 int head_dim, const AttentionMetadata& meta, Tensor& k_cache, Tensor& v_cache,
                                 const KvCacheScales& kv_scales = {}) override;
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
  // Uploads the batch's host arrays, one sample_rows_cuda launch, downloads the results (the
  // download synchronises the stream); the sampler's scratch is kept and grown as needed.
  void sample_rows(const Tensor& logits, const SamplingBatch& batch, const SamplingResults& out) override;
  void copy_blocks(const std::vector<Tensor>& caches, const std::vector<int64_t>& src_dst) override;
  void swap_blocks(const Tensor& src, Tensor& dst, const std::vector<int64_t>& src_dst) override;
  void move_kv_slots(Tensor& k_cache, Tensor& v_cache, const std::vector<int64_t>& src_dst,
                     const std::vector<float>& cos_sin, int rot_dim, const KvCacheScales& kv_scales) override;

  void reset_peak_memory() override;
  size_t peak_memory_bytes() override;
  void release_cached_memory() override;

  // While on, activations come from the CUDA graphs' private pool (best-fit, kept for replays)
  // instead of the main one: memory a graph uses between replays is then never handed to
  // anything that outlives a replay. cuda_graphs.cpp turns it on around warm-up and capture.
  void set_graph_pool(bool on) override;
  // Device memory the graphs' pool holds.
  size_t graph_pool_bytes() const override;

  // Device memory outside the caching pool (weights, KV cache): exact size, freed on release.
  DeviceTensor empty_exact(DType dtype, const std::vector<int64_t>& shape) override;
  // The stream all work runs on (a cudaStream_t).
  void* stream() const override;

  // --cpu-offload-gb (weight_streamer.h): no-ops without an offload plan. Never ran on a GPU.
  void weights_of_layer(int layer) override;
  void begin_layers() override;
  void before_layer(int layer) override;
  WeightOffloadStats weight_offload_stats() const override;

 private:
  // x as the quantized GEMV reads it: itself or an aligned copy (owned by `copy`).
  struct GemvRows {
    const void* data = nullptr;
    int64_t ld = 0;
    DeviceTensor copy;
  };
  GemvRows gemv_rows(const Tensor& x);

  DeviceTensor sampling_work_;    // F32 [sampling_capacity_]: the sampler's processed logits
  DeviceTensor sampling_counts_;  // I32 [sampling_capacity_], all zero between calls
  size_t sampling_capacity_ = 0;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Number of usable CUDA devices; 0 when the driver is missing or reports an error.
int cuda_device_count();

}  // namespace cypris
