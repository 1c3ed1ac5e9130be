#include "engine/backend/cpu/cpu_backend.h"

#include <cstring>

#include "engine/common/error.h"
#include "engine/backend/backend_checks.h"
#include "engine/backend/cpu/host_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_shift.h"
#include "kernels/cpu/dummy_fill.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/lora.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant/quant_gemm.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {

using backend_checks::require_contiguous;
constexpr const char* kName = "cpu backend";

// Free activation blocks kept for reuse (beyond what a step has in use).
constexpr size_t kMaxCachedActivationBytes = size_t{1} << 30;

CpuBackend::CpuBackend(int threads)
    : pool_(std::make_unique<ThreadPool>(threads)),
      memory_(std::make_shared<HostBlockPool>(kMaxCachedActivationBytes)) {
  init_blas_single_threaded();
}
CpuBackend::~CpuBackend() = default;

int CpuBackend::threads() const {
  return pool_->size();
}

DeviceTensor CpuBackend::empty(DType dtype, const std::vector<int64_t>& shape) {
  Tensor view(nullptr, dtype, shape);
  std::shared_ptr<void> block = memory_->get(view.nbytes());
  view.data = block.get();
  return DeviceTensor{view, std::move(block)};
}

DeviceTensor CpuBackend::zeros(DType dtype, const std::vector<int64_t>& shape) {
  DeviceTensor t = empty(dtype, shape);
  if (t.view.nbytes()) std::memset(t.view.data, 0, t.view.nbytes());
  return t;
}

DeviceTensor CpuBackend::upload(const void* data, DType dtype, const std::vector<int64_t>& shape) {
  DeviceTensor t = empty(dtype, shape);
  if (t.view.nbytes()) std::memcpy(t.view.data, data, t.view.nbytes());
  return t;
}

DeviceTensor CpuBackend::upload_weight(HostTensor&& host) {
  auto buf = std::make_shared<Buffer>(std::move(host.buffer));
  Tensor view(buf->data(), host.dtype, host.shape);
  return DeviceTensor{view, buf};
}

std::optional<DeviceTensor> CpuBackend::dummy_weight(DType dtype, const std::vector<int64_t>& shape,
                                                     const std::vector<DummyFill>& runs) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) return std::nullopt;
  DeviceTensor t = empty(dtype, shape);
  backend_checks::check_dummy_runs(kName, t.view.numel(), runs);
  for (const DummyFill& run : runs) dummy_fill_cpu(t.view.data, dtype, run, pool_.get());
  return t;
}

void CpuBackend::download(const Tensor& t, void* dst) {
  require_contiguous(kName, t, "download source");
  if (t.nbytes()) std::memcpy(dst, t.data, t.nbytes());
}

void CpuBackend::upload_into(const void* src, Tensor& dst) {
  require_contiguous(kName, dst, "upload destination");
  if (dst.nbytes()) std::memcpy(dst.data, src, dst.nbytes());
}

void CpuBackend::lora_linear(const Tensor& x, const Tensor& slots, const Tensor& a, const Tensor& b,
                             const Tensor& scales, Tensor& out) {
  backend_checks::check_lora_linear(kName, DType::F32, x, slots, a, b, scales, out);
  const int64_t L = a.shape[0];
  const int32_t* s = slots.as<int32_t>();
  for (int64_t r = 0; r < slots.shape[0]; ++r) {
    CYPRIS_CHECK(s[r] < L, "{}: LoRA slot {} of row {} is not below the {} adapter slots", kName, s[r], r, L);
  }
  lora_bgmv_f32(x.as<float>(), row_stride(x), s, x.shape[0], a.as<float>(), b.as<float>(), scales.as<float>(),
                a.shape[1], a.shape[2], b.shape[1], out.as<float>(), row_stride(out), pool_.get());
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  backend_checks::check_embedding(kName, DType::F32, ids, table, out);
  embedding_cpu(ids.as<int32_t>(), ids.shape[0], table.data, table.dtype, table.shape[0], table.shape[1],
                out.as<float>(), pool_.get());
}

void CpuBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  backend_checks::check_linear(kName, DType::F32, x, w, bias, out);
  if (dtype_is_quantized(w.dtype)) {
    // GGUF weights stay quantized; activations go to 8 bits per block (kernels/cpu/quant/).
    quant_gemm_xwt(x.as<float>(), x.shape[0], x.shape[1], row_stride(x), w.data, w.dtype, w.shape[0],
                   bias ? bias->as<float>() : nullptr, out.as<float>(), row_stride(out), pool_.get());
    return;
  }
  gemm_xwt(x.as<float>(), x.shape[0], x.shape[1], row_stride(x), w.data, w.dtype, w.shape[0],
           bias ? bias->as<float>() : nullptr, out.as<float>(), row_stride(out), pool_.get());
}

void CpuBackend::grouped_linear(const Tensor& x, const std::vector<LinearGroup>& groups, Tensor& out) {
  if (!backend_checks::check_grouped_linear(kName, DType::F32, x, groups, out)) return;
  std::vector<GemmGroup> gg;
  gg.reserve(groups.size());
  for (const LinearGroup& g : groups) gg.push_back({g.w->data, g.first, g.rows});
  const DType wt = groups.front().w->dtype;
  const auto count = static_cast<int64_t>(gg.size());
  if (dtype_is_quantized(wt)) {
    quant_gemm_xwt_grouped(x.as<float>(), x.shape[1], row_stride(x), gg.data(), count, wt, out.shape[1],
                           out.as<float>(), row_stride(out), pool_.get());
  } else {
    gemm_xwt_grouped(x.as<float>(), x.shape[1], row_stride(x), gg.data(), count, wt, out.shape[1], out.as<float>(),
                     row_stride(out), pool_.get());
  }
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  backend_checks::check_rms_norm(kName, DType::F32, x, w, out);
  rms_norm_cpu(x.as<float>(), w.as<float>(), eps, x.shape[0], x.shape[1], out.as<float>(), pool_.get());
}

void CpuBackend::layer_norm(const Tensor& x, const Tensor& w, const Tensor* bias, float eps, Tensor& out) {
  backend_checks::check_layer_norm(kName, DType::F32, x, w, bias, out);
  layer_norm_cpu(x.as<float>(), w.as<float>(), bias ? bias->as<float>() : nullptr, eps, x.shape[0], x.shape[1],
                 out.as<float>(), pool_.get());
}

void CpuBackend::fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) {
  backend_checks::check_fused_add_rms_norm(kName, DType::F32, x, residual, w);
  fused_add_rms_norm_cpu(x.as<float>(), residual.as<float>(), w.as<float>(), eps, x.shape[0], x.shape[1], pool_.get());
}

void CpuBackend::rotary(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos_sin, int head_dim) {
  backend_checks::check_rotary(kName, DType::F32, q, k, positions, cos_sin, head_dim);
  rotary_cpu(q.as<float>(), row_stride(q), static_cast<int>(q.shape[1] / head_dim), k.as<float>(), row_stride(k),
             static_cast<int>(k.shape[1] / head_dim), head_dim, static_cast<int>(cos_sin.shape[1]),
             positions.as<int32_t>(), positions.shape[0], cos_sin.as<float>(), cos_sin.shape[0], pool_.get());
}

void CpuBackend::write_kv_cache(const Tensor& k, const Tensor& v, const AttentionMetadata& meta, Tensor& k_cache,
                                Tensor& v_cache, const KvCacheScales& kv_scales) {
  const int64_t width = backend_checks::check_write_kv_cache(kName, DType::F32, k, v, meta, k_cache, v_cache);
  write_kv_cache_cpu(k.as<float>(), row_stride(k), v.as<float>(), row_stride(v), k.shape[0],
                     meta.slot_mapping.as<int64_t>(), width, k_cache.data, v_cache.data,
                     k_cache.shape[0] * k_cache.shape[1], k_cache.dtype, kv_scales.k, kv_scales.v);
}

void CpuBackend::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const AttentionMetadata& meta, float scale, int sliding_window, Tensor& out,
                                 const KvCacheScales& kv_scales, float softcap) {
  const PagedAttentionParams p = backend_checks::paged_attention_params(kName, DType::F32, q, k_cache, v_cache, meta, scale,
                                                                        sliding_window, out, kv_scales, softcap);
  CYPRIS_CHECK(meta.query_start_loc.as<int32_t>()[meta.num_seqs] == q.shape[0],
               "cpu backend: attention metadata does not cover the {} query rows", q.shape[0]);
  paged_attention_cpu(p, pool_.get());
}

void CpuBackend::silu_and_mul(const Tensor& x, Tensor& out) {
  backend_checks::check_silu_and_mul(kName, DType::F32, x, out);
  silu_and_mul_cpu(x.as<float>(), x.shape[0], out.shape[1], out.as<float>(), pool_.get());
}

void CpuBackend::gelu_tanh_and_mul(const Tensor& x, Tensor& out) {
  backend_checks::check_silu_and_mul(kName, DType::F32, x, out);
  gelu_tanh_and_mul_cpu(x.as<float>(), x.shape[0], out.shape[1], out.as<float>(), pool_.get());
}

void CpuBackend::rms_norm_heads(Tensor& x, const Tensor& w, float eps) {
  backend_checks::check_rms_norm_heads(kName, DType::F32, x, w);
  const int d = static_cast<int>(w.shape[0]);
  rms_norm_heads_cpu(x.as<float>(), row_stride(x), x.shape[0], static_cast<int>(x.shape[1] / d), d, w.as<float>(), eps,
                     pool_.get());
}

void CpuBackend::layer_norm_heads(Tensor& x, const Tensor& w, float eps) {
  backend_checks::check_layer_norm_heads(kName, DType::F32, x, w);
  layer_norm_heads_cpu(x.as<float>(), row_stride(x), x.shape[0], static_cast<int>(w.shape[0]),
                       static_cast<int>(w.shape[1]), w.as<float>(), eps, pool_.get());
}

void CpuBackend::scale_and_cap(Tensor& x, float scale, float cap) {
  backend_checks::check_scale_and_cap(kName, DType::F32, x, scale, cap);
  scale_and_cap_cpu(x.as<float>(), x.shape[0], x.shape[1], row_stride(x), scale, cap, pool_.get());
}

void CpuBackend::gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) {
  backend_checks::check_gather_rows(kName, DType::F32, x, indices, out);
  gather_rows_cpu(x.as<float>(), x.shape[0], x.shape[1], indices.as<int32_t>(), indices.shape[0], out.as<float>());
}

void CpuBackend::add(const Tensor& x, Tensor& out) {
  backend_checks::check_add(kName, DType::F32, x, out);
  add_rows_cpu(x.as<float>(), row_stride(x), out.as<float>(), row_stride(out), x.shape[0], x.shape[1]);
}

void CpuBackend::sample_rows(const Tensor& logits, const SamplingBatch& batch, const SamplingResults& out) {
  CYPRIS_CHECK(logits.dtype == DType::F32 && logits.ndim() == 2 && logits.shape[0] >= batch.rows,
               "{}: sampling needs fp32 logits [>= {} rows, vocab], got {} {}", kName, batch.rows,
               dtype_name(logits.dtype), logits.shape_str());
  SamplingBatch b = batch;
  b.logits = logits.as<float>();
  b.ld = row_stride(logits);
  b.vocab = static_cast<int32_t>(logits.shape[1]);
  sample_rows_cpu(b, out);
}

void CpuBackend::scatter_add_rows(const Tensor& src, const Tensor& indices, const Tensor& weights, Tensor& out) {
  backend_checks::check_scatter_add_rows(kName, DType::F32, src, indices, weights, out);
  scatter_add_rows_cpu(src.as<float>(), src.shape[0], src.shape[1], indices.as<int32_t>(), weights.as<float>(),
                       out.as<float>(), out.shape[0]);
}

namespace {

// Bytes of one slab along dim 0 (one KV block of a layer's cache or of the swap pool).
size_t block_bytes(const Tensor& cache) {
  return cache.numel() == 0 ? 0 : cache.nbytes() / static_cast<size_t>(cache.shape[0]);
}

}  // namespace

void CpuBackend::copy_blocks(const std::vector<Tensor>& caches, const std::vector<int64_t>& src_dst) {
  CYPRIS_CHECK(src_dst.size() % 2 == 0, "cpu backend: copy_blocks needs (src, dst) pairs");
  for (const Tensor& c : caches) {
    const size_t bytes = block_bytes(c);
    char* base = static_cast<char*>(c.data);
    for (size_t i = 0; i < src_dst.size(); i += 2) {
      std::memcpy(base + src_dst[i + 1] * bytes, base + src_dst[i] * bytes, bytes);
    }
  }
}

void CpuBackend::swap_blocks(const Tensor& src, Tensor& dst, const std::vector<int64_t>& src_dst) {
  CYPRIS_CHECK(src_dst.size() % 2 == 0 && block_bytes(src) == block_bytes(dst),
               "cpu backend: swap_blocks needs (src, dst) pairs between tensors of equal block size");
  const size_t bytes = block_bytes(src);
  for (size_t i = 0; i < src_dst.size(); i += 2) {
    std::memcpy(static_cast<char*>(dst.data) + src_dst[i + 1] * bytes,
                static_cast<const char*>(src.data) + src_dst[i] * bytes, bytes);
  }
}

void CpuBackend::move_kv_slots(Tensor& k_cache, Tensor& v_cache, const std::vector<int64_t>& src_dst,
                               const std::vector<float>& cos_sin, int rot_dim, const KvCacheScales& kv_scales) {
  CYPRIS_CHECK(k_cache.ndim() == 4 && k_cache.shape == v_cache.shape && k_cache.dtype == v_cache.dtype,
               "cpu backend: move_kv_slots needs K and V caches of one shape [blocks, block_size, heads, head_dim]");
  CYPRIS_CHECK(src_dst.size() % 2 == 0, "cpu backend: move_kv_slots needs (src, dst) slot pairs");
  const int64_t num_moves = static_cast<int64_t>(src_dst.size() / 2);
  if (cos_sin.empty()) rot_dim = 0;
  CYPRIS_CHECK(rot_dim == 0 || static_cast<int64_t>(cos_sin.size()) == num_moves * rot_dim,
               "cpu backend: move_kv_slots has {} cos/sin values for {} moves of rot_dim {}", cos_sin.size(), num_moves,
               rot_dim);
  move_kv_slots_cpu(k_cache.data, v_cache.data, k_cache.shape[0] * k_cache.shape[1], k_cache.dtype,
                    static_cast<int>(k_cache.shape[2]), static_cast<int>(k_cache.shape[3]), rot_dim, src_dst.data(),
                    num_moves, rot_dim == 0 ? nullptr : cos_sin.data(), kv_scales.k);
}

}  // namespace cypris
