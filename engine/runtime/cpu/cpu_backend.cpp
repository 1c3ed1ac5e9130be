#include "engine/runtime/cpu/cpu_backend.h"

#include <cstring>

#include "engine/common/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

void require(const Tensor& t, DType dtype, int ndim, const char* what) {
  CYPRIS_CHECK(t.dtype == dtype && t.ndim() == ndim, "cpu backend: {} must be {} with {} dims, got {} {}", what,
               dtype_name(dtype), ndim, dtype_name(t.dtype), t.shape_str());
}

void require_contiguous(const Tensor& t, const char* what) {
  CYPRIS_CHECK(t.contiguous() || (t.ndim() == 2 && row_stride(t) == t.shape[1]), "cpu backend: {} must be contiguous",
               what);
}

void require_kv_cache(const Tensor& k_cache, const Tensor& v_cache) {
  CYPRIS_CHECK(is_kv_cache_dtype(k_cache.dtype) && k_cache.ndim() == 4 && v_cache.dtype == k_cache.dtype &&
                   v_cache.shape == k_cache.shape,
               "cpu backend: K/V caches must be F32, F8E4M3 or F8E5M2 [blocks, block_size, kv_heads, head_dim] of "
               "the same type and shape, got {} {} and {} {}",
               dtype_name(k_cache.dtype), k_cache.shape_str(), dtype_name(v_cache.dtype), v_cache.shape_str());
}

}  // namespace

CpuBackend::CpuBackend(int threads) : pool_(std::make_unique<ThreadPool>(threads)) {
  init_blas_single_threaded();
}
CpuBackend::~CpuBackend() = default;

int CpuBackend::threads() const {
  return pool_->size();
}

DeviceTensor CpuBackend::empty(DType dtype, const std::vector<int64_t>& shape) {
  Tensor view(nullptr, dtype, shape);
  auto buf = std::make_shared<Buffer>(view.nbytes());
  view.data = buf->data();
  return DeviceTensor{view, buf};
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

void CpuBackend::download(const Tensor& t, void* dst) {
  require_contiguous(t, "download source");
  if (t.nbytes()) std::memcpy(dst, t.data, t.nbytes());
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  require(ids, DType::I32, 1, "embedding ids");
  require(out, DType::F32, 2, "embedding output");
  require_contiguous(out, "embedding output");
  CYPRIS_CHECK(table.ndim() == 2 && table.shape[1] == out.shape[1] && out.shape[0] == ids.shape[0],
               "cpu backend: embedding shapes {} {} {}", ids.shape_str(), table.shape_str(), out.shape_str());
  embedding_cpu(ids.as<int32_t>(), ids.shape[0], table.data, table.dtype, table.shape[0], table.shape[1],
                out.as<float>(), pool_.get());
}

void CpuBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  require(x, DType::F32, 2, "linear input");
  require(out, DType::F32, 2, "linear output");
  CYPRIS_CHECK(w.ndim() == 2 && w.shape[1] == x.shape[1] && out.shape[0] == x.shape[0] && out.shape[1] == w.shape[0],
               "cpu backend: linear shapes x {} w {} out {}", x.shape_str(), w.shape_str(), out.shape_str());
  if (bias) {
    require(*bias, DType::F32, 1, "linear bias");
    CYPRIS_CHECK(bias->shape[0] == w.shape[0], "cpu backend: bias {} for weight {}", bias->shape_str(), w.shape_str());
  }
  gemm_xwt(x.as<float>(), x.shape[0], x.shape[1], row_stride(x), w.data, w.dtype, w.shape[0],
           bias ? bias->as<float>() : nullptr, out.as<float>(), row_stride(out), pool_.get());
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  require(x, DType::F32, 2, "rms_norm input");
  require(w, DType::F32, 1, "rms_norm weight");
  require_contiguous(x, "rms_norm input");
  require_contiguous(out, "rms_norm output");
  CYPRIS_CHECK(w.shape[0] == x.shape[1] && out.shape == x.shape, "cpu backend: rms_norm shapes");
  rms_norm_cpu(x.as<float>(), w.as<float>(), eps, x.shape[0], x.shape[1], out.as<float>(), pool_.get());
}

void CpuBackend::fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) {
  require(x, DType::F32, 2, "rms_norm input");
  require(residual, DType::F32, 2, "rms_norm residual");
  require(w, DType::F32, 1, "rms_norm weight");
  require_contiguous(x, "rms_norm input");
  require_contiguous(residual, "rms_norm residual");
  CYPRIS_CHECK(w.shape[0] == x.shape[1] && residual.shape == x.shape, "cpu backend: fused_add_rms_norm shapes");
  fused_add_rms_norm_cpu(x.as<float>(), residual.as<float>(), w.as<float>(), eps, x.shape[0], x.shape[1], pool_.get());
}

void CpuBackend::rotary(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos_sin, int head_dim) {
  require(q, DType::F32, 2, "rotary q");
  require(k, DType::F32, 2, "rotary k");
  require(positions, DType::I32, 1, "rotary positions");
  require(cos_sin, DType::F32, 2, "rotary cos/sin table");
  CYPRIS_CHECK(q.shape[0] == positions.shape[0] && k.shape[0] == positions.shape[0] && q.shape[1] % head_dim == 0 &&
                   k.shape[1] % head_dim == 0 && cos_sin.shape[1] <= head_dim,
               "cpu backend: rotary shapes");
  rotary_cpu(q.as<float>(), row_stride(q), static_cast<int>(q.shape[1] / head_dim), k.as<float>(), row_stride(k),
             static_cast<int>(k.shape[1] / head_dim), head_dim, static_cast<int>(cos_sin.shape[1]),
             positions.as<int32_t>(), positions.shape[0], cos_sin.as<float>(), cos_sin.shape[0], pool_.get());
}

void CpuBackend::write_kv_cache(const Tensor& k, const Tensor& v, const AttentionMetadata& meta, Tensor& k_cache,
                                Tensor& v_cache, const KvCacheScales& kv_scales) {
  require(k, DType::F32, 2, "cache write k");
  require(v, DType::F32, 2, "cache write v");
  require_kv_cache(k_cache, v_cache);
  const int64_t width = k_cache.shape[2] * k_cache.shape[3];
  CYPRIS_CHECK(k.shape[1] == width && v.shape[1] == width && meta.slot_mapping.shape[0] == k.shape[0],
               "cpu backend: cache write shapes k {} cache {}", k.shape_str(), k_cache.shape_str());
  write_kv_cache_cpu(k.as<float>(), row_stride(k), v.as<float>(), row_stride(v), k.shape[0],
                     meta.slot_mapping.as<int64_t>(), width, k_cache.data, v_cache.data,
                     k_cache.shape[0] * k_cache.shape[1], k_cache.dtype, kv_scales.k, kv_scales.v);
}

void CpuBackend::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const AttentionMetadata& meta, float scale, int sliding_window, Tensor& out,
                                 const KvCacheScales& kv_scales) {
  require(q, DType::F32, 2, "attention q");
  require(out, DType::F32, 2, "attention output");
  require_kv_cache(k_cache, v_cache);
  PagedAttentionParams p;
  p.q = q.as<float>();
  p.ldq = row_stride(q);
  p.k_cache = k_cache.data;
  p.v_cache = v_cache.data;
  p.cache_dtype = k_cache.dtype;
  p.k_scale = kv_scales.k;
  p.v_scale = kv_scales.v;
  p.num_blocks = k_cache.shape[0];
  p.block_size = static_cast<int>(k_cache.shape[1]);
  p.num_kv_heads = static_cast<int>(k_cache.shape[2]);
  p.head_dim = static_cast<int>(k_cache.shape[3]);
  CYPRIS_CHECK(q.shape[1] % p.head_dim == 0 && out.shape == q.shape, "cpu backend: attention shapes q {} out {}",
               q.shape_str(), out.shape_str());
  p.num_heads = static_cast<int>(q.shape[1] / p.head_dim);
  p.query_start_loc = meta.query_start_loc.as<int32_t>();
  p.seq_lens = meta.seq_lens.as<int32_t>();
  p.block_tables = meta.block_tables.as<int32_t>();
  p.max_blocks_per_seq = meta.max_blocks_per_seq;
  p.num_seqs = meta.num_seqs;
  CYPRIS_CHECK(meta.query_start_loc.numel() == meta.num_seqs + 1 &&
                   meta.query_start_loc.as<int32_t>()[meta.num_seqs] == q.shape[0],
               "cpu backend: attention metadata does not cover the {} query rows", q.shape[0]);
  p.scale = scale;
  p.sliding_window = sliding_window;
  p.out = out.as<float>();
  p.ldo = row_stride(out);
  paged_attention_cpu(p, pool_.get());
}

void CpuBackend::silu_and_mul(const Tensor& x, Tensor& out) {
  require(x, DType::F32, 2, "silu_and_mul input");
  require(out, DType::F32, 2, "silu_and_mul output");
  require_contiguous(x, "silu_and_mul input");
  require_contiguous(out, "silu_and_mul output");
  CYPRIS_CHECK(x.shape[0] == out.shape[0] && x.shape[1] == 2 * out.shape[1], "cpu backend: silu_and_mul shapes");
  silu_and_mul_cpu(x.as<float>(), x.shape[0], out.shape[1], out.as<float>(), pool_.get());
}

void CpuBackend::gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) {
  require(x, DType::F32, 2, "gather input");
  require(indices, DType::I32, 1, "gather indices");
  require_contiguous(x, "gather input");
  CYPRIS_CHECK(out.shape[0] == indices.shape[0] && out.shape[1] == x.shape[1], "cpu backend: gather shapes");
  gather_rows_cpu(x.as<float>(), x.shape[0], x.shape[1], indices.as<int32_t>(), indices.shape[0], out.as<float>());
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

}  // namespace cypris
