// The Backend: the small set of ops the models are written against (embedding, linear, norms,
// rotary, paged KV cache write + attention, activation, row gather), and the memory they run on.
// CpuBackend (engine/backend/cpu/) and CudaBackend (engine/backend/cuda/, CUDA builds) implement it;
// make_backend (backend_factory.h) picks one. Activations (hidden states, q/k/v, MLP
// intermediates) are of the backend's activation_dtype(): fp32 on the CPU (the reference), the
// model dtype (BF16/F16) on a GPU, with fp32 accumulation inside the kernels; norm weights, biases,
// rotary tables and logits stay fp32. Weights may be F32/F16/BF16 or block-quantized. 2-D activations may be column slices of a wider buffer: their strides are {row_stride, 1}.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/tensor.h"
#include "engine/loader/weights.h"
#include "kernels/common/sampling_types.h"

namespace cypris {

// A tensor together with ownership of its memory (host or device).
struct DeviceTensor {
  Tensor view;
  std::shared_ptr<void> storage;
  bool defined() const { return view.data != nullptr || view.numel() == 0; }
};

// Row stride in elements of a 2-D tensor (its width when contiguous).
inline int64_t row_stride(const Tensor& t) {
  return t.strides.empty() ? t.shape.back() : t.strides[0];
}

// Columns [col0, col0 + ncols) of a 2-D tensor, as a strided view.
Tensor column_slice(const Tensor& t, int64_t col0, int64_t ncols);
// Rows [row0, row0 + nrows) of a 2-D tensor (same row stride).
Tensor row_slice(const Tensor& t, int64_t row0, int64_t nrows);

// One weight's run of rows in Backend::grouped_linear: out[first, first + rows) = x[first, first +
// rows) · wᵀ. The weight is borrowed for the call.
struct LinearGroup {
  const Tensor* w = nullptr;
  int64_t first = 0;
  int64_t rows = 0;
};

// Paged-attention metadata on the backend's device (copied from a BatchContext).
struct AttentionMetadata {
  Tensor query_start_loc;  // I32 [num_seqs + 1]
  Tensor seq_lens;         // I32 [num_seqs]
  Tensor block_tables;     // I32 [num_seqs, max_blocks_per_seq]
  Tensor slot_mapping;     // I64 [num_tokens]
  int num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  // Host-side upper bounds (0 = unknown) so a device backend can size its launch without reading
  // device memory back: the longest new-token run and the longest context in the batch.
  int max_query_len = 0;
  int max_seq_len = 0;
};

// fp8 KV cache scales of one layer (vLLM semantics): the cache holds fp8(x / scale) and attention
// reads fp32(stored) * scale. Ignored for an fp32 cache.
struct KvCacheScales {
  float k = 1.0f;
  float v = 1.0f;
};

// Free and total bytes of the backend's device memory (both 0 on the CPU).
struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // Whether linear() and embedding() take a weight of this block-quantized type (Q4_K, ...) as it
  // is. A model keeps a quantized weight in its own type only then, else dequantizes it to its
  // weight dtype. The CPU backend multiplies every quantized DType (kernels/cpu/quant); a GPU
  // backend overrides this once it has kernels for them.
  virtual bool supports_quantized_weight(DType type) const { return device() == Device::Cpu && dtype_is_quantized(type); }

  // The element type of activation tensors for every op below (F32, F16 or BF16). A linear output
  // may also be F32 (the logits).
  virtual DType activation_dtype() const { return DType::F32; }

  // Uninitialised memory on the device.
  virtual DeviceTensor empty(DType dtype, const std::vector<int64_t>& shape) = 0;
  virtual DeviceTensor zeros(DType dtype, const std::vector<int64_t>& shape) = 0;
  // Copies host data to the device.
  virtual DeviceTensor upload(const void* data, DType dtype, const std::vector<int64_t>& shape) = 0;
  // Takes a loaded weight; the CPU backend keeps the host buffer as it is (no copy).
  virtual DeviceTensor upload_weight(HostTensor&& host) = 0;
  // --load-format dummy: a new weight of `shape` (F32, F16 or BF16) whose values are generated
  // where it lives from `runs` (kernels/common/dummy_fill.h), which together cover it; allocated
  // as upload_weight allocates, ready when this returns. nullopt when this backend has no
  // generator: the caller then generates the values on the host and calls upload_weight.
  virtual std::optional<DeviceTensor> dummy_weight(DType dtype, const std::vector<int64_t>& shape,
                                                   const std::vector<DummyFill>& runs) {
    return std::nullopt;
  }
  // Copies a contiguous device tensor to host memory (t.nbytes() bytes).
  virtual void download(const Tensor& t, void* dst) = 0;
  // Copies dst.nbytes() bytes of host memory into the contiguous device tensor dst, which may be
  // part of a larger allocation (a LoRA adapter's slot in its stacked weights).
  virtual void upload_into(const void* src, Tensor& dst) = 0;
  // Host memory the device can copy to and from quickly (pinned on CUDA): the KV swap pool.
  virtual DeviceTensor empty_host(DType dtype, const std::vector<int64_t>& shape) = 0;
  // Waits until all work queued on the device is done (no-op on the CPU).
  virtual void synchronize() = 0;
  virtual DeviceMemoryInfo memory_info() = 0;
  // The memory profile behind --gpu-memory-utilization: the most activation memory in use at
  // once since reset_peak_memory(), beyond what was in use at the reset (0 on the CPU).
  virtual void reset_peak_memory() {}
  virtual size_t peak_memory_bytes() { return 0; }
  // Gives the allocator's cached free blocks back to the device (after the profile run, so that
  // the KV cache and the CUDA graphs find the memory the budget left them); no-op on the CPU.
  virtual void release_cached_memory() {}
  // What the decode graphs (engine/runtime/cuda/cuda_graphs.cpp) capture with, so that the runtime
  // never needs the concrete backend: the native stream all work is queued on (a cudaStream_t; null
  // where there is none: no graphs), memory outside the caching pool (never moves or goes back to
  // the pool), and the graphs' private activation pool, switched on around warm-up and capture.
  virtual void* stream() const { return nullptr; }
  virtual DeviceTensor empty_exact(DType dtype, const std::vector<int64_t>& shape) { return empty(dtype, shape); }
  virtual void set_graph_pool(bool on) {}
  virtual size_t graph_pool_bytes() const { return 0; }

  // out[t] = table[ids[t]]; ids I32 [T], table [vocab, hidden], out [T, hidden].
  virtual void embedding(const Tensor& ids, const Tensor& table, Tensor& out) = 0;
  // out = x · wᵀ + bias; x [M, K], w [N, K], bias F32 [N] or null, out [M, N] (activation dtype or F32).
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) = 0;
  // A mixture-of-experts projection: for each group, out[first, first + rows) = x[first, first +
  // rows) · wᵀ, every w [N, K] of one dtype, no bias; x [M, K], out [M, N] (activation dtype),
  // groups disjoint and inside [0, M), rows not in a group left as they are. This default runs
  // linear() per non-empty group; the backends override it with one grouped product (one pass over
  // the thread pool on the CPU, one kernel launch or one cuBLAS grouped GEMM on CUDA).
  virtual void grouped_linear(const Tensor& x, const std::vector<LinearGroup>& groups, Tensor& out);
  // LoRA on one projection, for all adapters of the batch at once (the BGMV / SGMV idea of Punica
  // and S-LoRA): for each row r of x with s = slots[r] >= 0, out[r] += scales[s] * (x[r] · a[s]ᵀ) ·
  // b[s]ᵀ; rows with a negative slot are left as they are. x [T, K] (activation dtype, may be a
  // column slice), slots I32 [T] on the device, a [L, R, K] and b [L, N, R] (the L adapter slots'
  // weights, ranks below R zero-padded; activation dtype), scales F32 [L] on the device, out [T, N]
  // (activation dtype, may be a column slice). No host data is read, so CUDA graphs capture it.
  virtual void lora_linear(const Tensor& x, const Tensor& slots, const Tensor& a, const Tensor& b,
                           const Tensor& scales, Tensor& out) = 0;
  // out = rms_norm(x) * w; w F32 [hidden].
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) = 0;
  // residual += x; x = rms_norm(residual) * w.
  virtual void fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) = 0;
  // LayerNorm of each row: out = (x - mean(x)) / sqrt(var(x) + eps) * w (+ bias); x, out [T, hidden],
  // w F32 [hidden], bias F32 [hidden] or null (Cohere's has none).
  virtual void layer_norm(const Tensor& x, const Tensor& w, const Tensor* bias, float eps, Tensor& out) = 0;
  // Neox rotary in place on q [T, Hq*D] and k [T, Hkv*D]; cos_sin F32 [max_pos, rot_dim].
  virtual void rotary(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos_sin, int head_dim) = 0;
  // Stores k, v [T, Hkv*D] at meta.slot_mapping in the caches [num_blocks, block_size, Hkv, D]
  // (F32, F16, BF16, or F8E4M3 / F8E5M2 quantised with kv_scales).
  virtual void write_kv_cache(const Tensor& k, const Tensor& v, const AttentionMetadata& meta, Tensor& k_cache,
                              Tensor& v_cache, const KvCacheScales& kv_scales = {}) = 0;
  // rotary(q, k, positions, cos_sin, head_dim) then write_kv_cache(k, v, ...): what every rotary
  // attention layer does before attention. The default runs the two ops; CUDA fuses them into one
  // launch (the rotated k goes to the cache from registers).
  virtual void rotary_and_write_kv_cache(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions,
                                         const Tensor& cos_sin, int head_dim, const AttentionMetadata& meta,
                                         Tensor& k_cache, Tensor& v_cache, const KvCacheScales& kv_scales = {}) {
    rotary(q, k, positions, cos_sin, head_dim);
    write_kv_cache(k, v, meta, k_cache, v_cache, kv_scales);
  }
  // Causal attention of q [T, Hq*D] over the cached context; out [T, Hq*D]. window 0 = full.
  // scale is the softmax scale; kv_scales dequantise an fp8 cache; softcap > 0 caps the scores
  // as softcap * tanh(score / softcap) before the softmax (Gemma 2).
  virtual void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                               const AttentionMetadata& meta, float scale, int sliding_window, Tensor& out,
                               const KvCacheScales& kv_scales = {}, float softcap = 0.0f) = 0;
  // out = silu(x[:, :I]) * x[:, I:]; x [T, 2I], out [T, I].
  virtual void silu_and_mul(const Tensor& x, Tensor& out) = 0;
  // out = gelu_tanh(x[:, :I]) * x[:, I:]; x [T, 2I], out [T, I] (Gemma's GeGLU).
  virtual void gelu_tanh_and_mul(const Tensor& x, Tensor& out) = 0;
  // RMSNorm of each head in place: x [T, H*D] (may be a column slice), w F32 [D] (Qwen3's q/k norms).
  virtual void rms_norm_heads(Tensor& x, const Tensor& w, float eps) = 0;
  // LayerNorm without bias of each head in place, one weight row per head: x [T, H*D] (may be a
  // column slice), w F32 [H, D] (Command R+'s q/k norms): (x - mean) / sqrt(var + eps) * w[h].
  virtual void layer_norm_heads(Tensor& x, const Tensor& w, float eps) = 0;
  // In place on x [R, C] (may be a column slice): x = cap * tanh(scale * x / cap) when
  // cap > 0, else x * scale (embedding scaling, logit soft-capping, logit scale).
  virtual void scale_and_cap(Tensor& x, float scale, float cap) = 0;
  // One token per row of logits [>= batch.rows, vocab] F32 on this backend's device, by the sampling
  // fast path (logit_bias, penalties, temperature, top-k, top-p, min-p, a draw from the row's Philox
  // stream, raw logprobs; kernels/common/sampling_types.h). batch's arrays (params, history, biases)
  // and out are host memory; batch.logits / ld / vocab are taken from `logits`. CPU: sample_rows_cpu
  // (kernels/cpu/sampling.h); CUDA: sample_rows_cuda. Both draw the same uniform per row, so a
  // row's token does not depend on the backend.
  virtual void sample_rows(const Tensor& logits, const SamplingBatch& batch, const SamplingResults& out) = 0;
  // out[r] = x[indices[r]]; x [T, H], indices I32 [R], out [R, H].
  virtual void gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) = 0;
  // out += x, element-wise; x and out [T, H] (either may be a column slice): the residual adds of
  // parallel-block models (Cohere). No host data is involved, so CUDA graphs capture it.
  virtual void add(const Tensor& x, Tensor& out) = 0;
  // out[indices[r]] += weights[r] * src[r]; src [R, H], indices I32 [R] (distinct within a call,
  // in [0, T)), weights F32 [R], out [T, H]: a mixture-of-experts layer adds one expert's rows
  // back to their tokens.
  virtual void scatter_add_rows(const Tensor& src, const Tensor& indices, const Tensor& weights, Tensor& out) = 0;

  // KV block moves. A block is one slab along dim 0 ([block_size, Hkv, D] of a layer's cache);
  // src_dst holds (src, dst) block-id pairs flattened, ids already validated by the caller.
  // copy_blocks: inside each cache tensor (copy-on-write), all tensors in one go.
  virtual void copy_blocks(const std::vector<Tensor>& caches, const std::vector<int64_t>& src_dst) = 0;
  // swap_blocks: from src to dst, where either may be host memory from empty_host (swap out/in).
  virtual void swap_blocks(const Tensor& src, Tensor& dst, const std::vector<int64_t>& src_dst) = 0;
  // --context-shift by rotation: moves tokens between slots (block * block_size + offset) of one
  // layer's caches [num_blocks, block_size, Hkv, D], src_dst holding (src, dst) slot pairs; every
  // source is read before any destination is written. Each moved key's first rot_dim dims per head
  // are rotated (Neox halves) by its row of cos_sin F32 [num_moves, rot_dim] (rot_dim/2 cosines,
  // then rot_dim/2 sines; empty or rot_dim 0: moved unrotated); an fp8 cache is dequantized with
  // kv_scales.k, rotated and quantized again. The reference is move_kv_slots_cpu (kernels/cpu/kv_shift.h).
  virtual void move_kv_slots(Tensor& k_cache, Tensor& v_cache, const std::vector<int64_t>& src_dst,
                             const std::vector<float>& cos_sin, int rot_dim, const KvCacheScales& kv_scales) = 0;
};

}  // namespace cypris
