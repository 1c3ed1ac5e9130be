#include "engine/backend/backend.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "engine/common/error.h"
#include "engine/backend/backend_checks.h"

namespace cypris {

Tensor column_slice(const Tensor& t, int64_t col0, int64_t ncols) {
  CYPRIS_CHECK(t.ndim() == 2 && col0 >= 0 && col0 + ncols <= t.shape[1], "column_slice: [{}, {}) of {}", col0,
               col0 + ncols, t.shape_str());
  Tensor s = t;
  s.data = static_cast<char*>(t.data) + col0 * dtype_size(t.dtype);
  s.shape = {t.shape[0], ncols};
  s.strides = {row_stride(t), 1};
  return s;
}

Tensor row_slice(const Tensor& t, int64_t row0, int64_t nrows) {
  CYPRIS_CHECK(t.ndim() == 2 && row0 >= 0 && nrows >= 0 && row0 + nrows <= t.shape[0], "row_slice: [{}, {}) of {}",
               row0, row0 + nrows, t.shape_str());
  Tensor s = t;
  s.data = static_cast<char*>(t.data) + static_cast<size_t>(row0 * row_stride(t)) * dtype_size(t.dtype);
  s.shape = {nrows, t.shape[1]};
  return s;
}

void Backend::grouped_linear(const Tensor& x, const std::vector<LinearGroup>& groups, Tensor& out) {
  if (!backend_checks::check_grouped_linear(name().c_str(), activation_dtype(), x, groups, out)) return;
  for (const LinearGroup& g : groups) {
    if (g.rows == 0) continue;
    Tensor o = row_slice(out, g.first, g.rows);
    linear(row_slice(x, g.first, g.rows), *g.w, nullptr, o);
  }
}

}  // namespace cypris

namespace cypris::backend_checks {

void require(const char* backend, const Tensor& t, DType dtype, int ndim, const char* what) {
  CYPRIS_CHECK(t.dtype == dtype && t.ndim() == ndim, "{}: {} must be {} with {} dims, got {} {}", backend, what,
               dtype_name(dtype), ndim, dtype_name(t.dtype), t.shape_str());
}

void require_contiguous(const char* backend, const Tensor& t, const char* what) {
  CYPRIS_CHECK(t.contiguous() || (t.ndim() == 2 && row_stride(t) == t.shape[1]), "{}: {} must be contiguous", backend,
               what);
}

void check_lora_linear(const char* backend, DType act, const Tensor& x, const Tensor& slots, const Tensor& a,
                       const Tensor& b, const Tensor& scales, const Tensor& out) {
  require(backend, x, act, 2, "LoRA input");
  require(backend, out, act, 2, "LoRA output");
  require(backend, slots, DType::I32, 1, "LoRA slots");
  require(backend, a, act, 3, "LoRA A");
  require(backend, b, act, 3, "LoRA B");
  require(backend, scales, DType::F32, 1, "LoRA scales");
  require_contiguous(backend, a, "LoRA A");
  require_contiguous(backend, b, "LoRA B");
  CYPRIS_CHECK(x.strides.empty() || x.strides[1] == 1, "{}: LoRA input columns must be dense", backend);
  CYPRIS_CHECK(out.strides.empty() || out.strides[1] == 1, "{}: LoRA output columns must be dense", backend);
  const int64_t L = a.shape[0], R = a.shape[1], K = a.shape[2];
  CYPRIS_CHECK(x.shape[1] == K && out.shape[0] == x.shape[0] && slots.shape[0] == x.shape[0] && b.shape[0] == L &&
                   b.shape[2] == R && out.shape[1] == b.shape[1] && scales.shape[0] == L,
               "{}: LoRA shapes x {} slots {} A {} B {} scales {} out {} do not agree", backend, x.shape_str(),
               slots.shape_str(), a.shape_str(), b.shape_str(), scales.shape_str(), out.shape_str());
}

void check_embedding(const char* backend, DType act, const Tensor& ids, const Tensor& table, const Tensor& out) {
  require(backend, ids, DType::I32, 1, "embedding ids");
  require(backend, out, act, 2, "embedding output");
  require_contiguous(backend, out, "embedding output");
  CYPRIS_CHECK(table.ndim() == 2 && table.shape[1] == out.shape[1] && out.shape[0] == ids.shape[0],
               "{}: embedding shapes {} {} {}", backend, ids.shape_str(), table.shape_str(), out.shape_str());
}

void check_linear(const char* backend, DType act, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  require(backend, x, act, 2, "linear input");
  CYPRIS_CHECK((out.dtype == act || out.dtype == DType::F32) && out.ndim() == 2,
               "{}: linear output must be {} or float32 with 2 dims, got {} {}", backend, dtype_name(act),
               dtype_name(out.dtype), out.shape_str());
  CYPRIS_CHECK(w.ndim() == 2 && w.shape[1] == x.shape[1] && out.shape[0] == x.shape[0] && out.shape[1] == w.shape[0],
               "{}: linear shapes x {} w {} out {}", backend, x.shape_str(), w.shape_str(), out.shape_str());
  if (bias) {
    require(backend, *bias, DType::F32, 1, "linear bias");
    CYPRIS_CHECK(bias->shape[0] == w.shape[0], "{}: bias {} for weight {}", backend, bias->shape_str(), w.shape_str());
  }
}

bool check_grouped_linear(const char* backend, DType act, const Tensor& x, const std::vector<LinearGroup>& groups,
                          const Tensor& out) {
  require(backend, x, act, 2, "grouped linear input");
  require(backend, out, act, 2, "grouped linear output");
  CYPRIS_CHECK(out.shape[0] == x.shape[0], "{}: grouped linear x {} out {}", backend, x.shape_str(), out.shape_str());
  const Tensor* first_w = nullptr;
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (size_t i = 0; i < groups.size(); ++i) {
    const LinearGroup& g = groups[i];
    CYPRIS_CHECK(g.w != nullptr, "{}: grouped linear group {} has no weight", backend, i);
    CYPRIS_CHECK(g.w->ndim() == 2 && g.w->shape[1] == x.shape[1] && g.w->shape[0] == out.shape[1],
                 "{}: grouped linear group {}: w {} for x {} out {}", backend, i, g.w->shape_str(), x.shape_str(),
                 out.shape_str());
    if (first_w == nullptr) first_w = g.w;
    CYPRIS_CHECK(g.w->dtype == first_w->dtype, "{}: grouped linear group {} weight is {}, group 0's {}", backend, i,
                 dtype_name(g.w->dtype), dtype_name(first_w->dtype));
    CYPRIS_CHECK(g.first >= 0 && g.rows >= 0 && g.first + g.rows <= x.shape[0],
                 "{}: grouped linear group {} rows [{}, {}) outside [0, {})", backend, i, g.first, g.first + g.rows,
                 x.shape[0]);
    if (g.rows > 0) spans.emplace_back(g.first, g.first + g.rows);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    CYPRIS_CHECK(spans[i].first >= spans[i - 1].second, "{}: grouped linear groups overlap at row {}", backend,
                 spans[i].first);
  }
  return !spans.empty();
}

void check_rms_norm(const char* backend, DType act, const Tensor& x, const Tensor& w, const Tensor& out) {
  require(backend, x, act, 2, "rms_norm input");
  require(backend, w, DType::F32, 1, "rms_norm weight");
  require_contiguous(backend, x, "rms_norm input");
  require_contiguous(backend, out, "rms_norm output");
  require(backend, out, act, 2, "rms_norm output");
  CYPRIS_CHECK(w.shape[0] == x.shape[1] && out.shape == x.shape, "{}: rms_norm shapes x {} w {} out {}", backend,
               x.shape_str(), w.shape_str(), out.shape_str());
}

void check_layer_norm(const char* backend, DType act, const Tensor& x, const Tensor& w, const Tensor* bias,
                      const Tensor& out) {
  require(backend, x, act, 2, "layer_norm input");
  require(backend, w, DType::F32, 1, "layer_norm weight");
  require_contiguous(backend, x, "layer_norm input");
  require_contiguous(backend, out, "layer_norm output");
  require(backend, out, act, 2, "layer_norm output");
  CYPRIS_CHECK(w.shape[0] == x.shape[1] && out.shape == x.shape, "{}: layer_norm shapes x {} w {} out {}", backend,
               x.shape_str(), w.shape_str(), out.shape_str());
  if (bias) {
    require(backend, *bias, DType::F32, 1, "layer_norm bias");
    CYPRIS_CHECK(bias->shape == w.shape, "{}: layer_norm bias {} must have the weight's shape {}", backend,
                 bias->shape_str(), w.shape_str());
  }
}

void check_fused_add_rms_norm(const char* backend, DType act, const Tensor& x, const Tensor& residual, const Tensor& w) {
  require(backend, x, act, 2, "rms_norm input");
  require(backend, residual, act, 2, "rms_norm residual");
  require(backend, w, DType::F32, 1, "rms_norm weight");
  require_contiguous(backend, x, "rms_norm input");
  require_contiguous(backend, residual, "rms_norm residual");
  CYPRIS_CHECK(w.shape[0] == x.shape[1] && residual.shape == x.shape, "{}: fused_add_rms_norm shapes x {} residual {}",
               backend, x.shape_str(), residual.shape_str());
}

void check_rotary(const char* backend, DType act, const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& cos_sin,
                  int head_dim) {
  require(backend, q, act, 2, "rotary q");
  require(backend, k, act, 2, "rotary k");
  require(backend, positions, DType::I32, 1, "rotary positions");
  require(backend, cos_sin, DType::F32, 2, "rotary cos/sin table");
  CYPRIS_CHECK(head_dim > 0 && q.shape[0] == positions.shape[0] && k.shape[0] == positions.shape[0] &&
                   q.shape[1] % head_dim == 0 && k.shape[1] % head_dim == 0 && cos_sin.shape[1] <= head_dim,
               "{}: rotary shapes q {} k {} positions {} table {} head_dim {}", backend, q.shape_str(), k.shape_str(),
               positions.shape_str(), cos_sin.shape_str(), head_dim);
}

void require_kv_cache(const char* backend, const Tensor& k_cache, const Tensor& v_cache) {
  CYPRIS_CHECK(is_kv_cache_dtype(k_cache.dtype) && k_cache.ndim() == 4 && v_cache.dtype == k_cache.dtype &&
                   v_cache.shape == k_cache.shape,
               "{}: K/V caches must be F32, F16, BF16, F8E4M3 or F8E5M2 [blocks, block_size, kv_heads, head_dim] of the same "
               "type and shape, got {} {} and {} {}",
               backend, dtype_name(k_cache.dtype), k_cache.shape_str(), dtype_name(v_cache.dtype), v_cache.shape_str());
}

int64_t check_write_kv_cache(const char* backend, DType act, const Tensor& k, const Tensor& v, const AttentionMetadata& meta,
                             const Tensor& k_cache, const Tensor& v_cache) {
  require(backend, k, act, 2, "cache write k");
  require(backend, v, act, 2, "cache write v");
  require_kv_cache(backend, k_cache, v_cache);
  const int64_t width = k_cache.shape[2] * k_cache.shape[3];
  CYPRIS_CHECK(k.shape[1] == width && v.shape[1] == width && meta.slot_mapping.shape[0] == k.shape[0],
               "{}: cache write shapes k {} cache {}", backend, k.shape_str(), k_cache.shape_str());
  return width;
}

void check_paged_attention(const char* backend, DType act, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const AttentionMetadata& meta, const Tensor& out) {
  require(backend, q, act, 2, "attention q");
  require(backend, out, act, 2, "attention output");
  require_kv_cache(backend, k_cache, v_cache);
  CYPRIS_CHECK(k_cache.shape[3] > 0 && q.shape[1] % k_cache.shape[3] == 0 && out.shape == q.shape,
               "{}: attention shapes q {} out {} cache {}", backend, q.shape_str(), out.shape_str(),
               k_cache.shape_str());
  CYPRIS_CHECK(meta.query_start_loc.numel() == meta.num_seqs + 1,
               "{}: attention metadata has {} query starts for {} sequences", backend, meta.query_start_loc.numel(),
               meta.num_seqs);
}

PagedAttentionParams paged_attention_params(const char* backend, DType act, const Tensor& q, const Tensor& k_cache,
                                            const Tensor& v_cache, const AttentionMetadata& meta, float scale,
                                            int sliding_window, Tensor& out, const KvCacheScales& kv_scales,
                                            float softcap) {
  check_paged_attention(backend, act, q, k_cache, v_cache, meta, out);
  CYPRIS_CHECK(softcap >= 0.0f && std::isfinite(softcap), "{}: attention soft-cap must be >= 0, got {}", backend,
               softcap);
  PagedAttentionParams p;
  p.q = q.data;
  p.io_dtype = q.dtype;
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
  p.num_heads = static_cast<int>(q.shape[1] / p.head_dim);
  p.query_start_loc = meta.query_start_loc.as<int32_t>();
  p.seq_lens = meta.seq_lens.as<int32_t>();
  p.block_tables = meta.block_tables.as<int32_t>();
  p.max_blocks_per_seq = meta.max_blocks_per_seq;
  p.num_seqs = meta.num_seqs;
  p.scale = scale;
  p.sliding_window = sliding_window;
  p.softcap = softcap;
  p.out = out.data;
  p.ldo = row_stride(out);
  return p;
}

void check_silu_and_mul(const char* backend, DType act, const Tensor& x, const Tensor& out) {
  require(backend, x, act, 2, "silu_and_mul input");
  require(backend, out, act, 2, "silu_and_mul output");
  require_contiguous(backend, x, "silu_and_mul input");
  require_contiguous(backend, out, "silu_and_mul output");
  CYPRIS_CHECK(x.shape[0] == out.shape[0] && x.shape[1] == 2 * out.shape[1], "{}: silu_and_mul shapes x {} out {}",
               backend, x.shape_str(), out.shape_str());
}

void check_rms_norm_heads(const char* backend, DType act, const Tensor& x, const Tensor& w) {
  require(backend, x, act, 2, "rms_norm_heads input");
  require(backend, w, DType::F32, 1, "rms_norm_heads weight");
  CYPRIS_CHECK(w.shape[0] > 0 && x.shape[1] % w.shape[0] == 0 && row_stride(x) >= x.shape[1],
               "{}: rms_norm_heads shapes x {} w {} (x's width must be whole heads)", backend, x.shape_str(),
               w.shape_str());
}

void check_layer_norm_heads(const char* backend, DType act, const Tensor& x, const Tensor& w) {
  require(backend, x, act, 2, "layer_norm_heads input");
  require(backend, w, DType::F32, 2, "layer_norm_heads weight");
  CYPRIS_CHECK(w.shape[0] > 0 && w.shape[1] > 0 && x.shape[1] == w.shape[0] * w.shape[1] && row_stride(x) >= x.shape[1],
               "{}: layer_norm_heads shapes x {} w {} (x's width must be w's heads x head_dim)", backend, x.shape_str(),
               w.shape_str());
}

void check_scale_and_cap(const char* backend, DType act, const Tensor& x, float scale, float cap) {
  require(backend, x, act, 2, "scale_and_cap input");
  CYPRIS_CHECK(row_stride(x) >= x.shape[1], "{}: scale_and_cap row stride {} below width {}", backend, row_stride(x),
               x.shape[1]);
  CYPRIS_CHECK(std::isfinite(scale) && std::isfinite(cap) && cap >= 0.0f,
               "{}: scale_and_cap needs a finite scale and a cap >= 0, got {} and {}", backend, scale, cap);
}

void check_scatter_add_rows(const char* backend, DType act, const Tensor& src, const Tensor& indices, const Tensor& weights,
                            const Tensor& out) {
  require(backend, src, act, 2, "scatter_add_rows source");
  require(backend, indices, DType::I32, 1, "scatter_add_rows indices");
  require(backend, weights, DType::F32, 1, "scatter_add_rows weights");
  require(backend, out, act, 2, "scatter_add_rows output");
  require_contiguous(backend, src, "scatter_add_rows source");
  require_contiguous(backend, out, "scatter_add_rows output");
  CYPRIS_CHECK(indices.shape[0] == src.shape[0] && weights.shape[0] == src.shape[0] && out.shape[1] == src.shape[1],
               "{}: scatter_add_rows shapes src {} indices {} weights {} out {}", backend, src.shape_str(),
               indices.shape_str(), weights.shape_str(), out.shape_str());
}

void check_dummy_runs(const char* backend, int64_t numel, const std::vector<DummyFill>& runs) {
  for (const DummyFill& run : runs) {
    CYPRIS_CHECK(run.dst_offset >= 0 && run.rows >= 0 && run.row_len >= 0 &&
                     run.dst_offset + run.rows * run.row_len <= numel,
                 "{}: dummy_weight: a run of {} elements at {} outside a weight of {}", backend,
                 run.rows * run.row_len, run.dst_offset, numel);
  }
}

void check_add(const char* backend, DType act, const Tensor& x, const Tensor& out) {
  require(backend, x, act, 2, "add input");
  require(backend, out, act, 2, "add output");
  CYPRIS_CHECK(x.shape == out.shape && row_stride(x) >= x.shape[1] && row_stride(out) >= out.shape[1],
               "{}: add shapes x {} out {}", backend, x.shape_str(), out.shape_str());
}

void check_gather_rows(const char* backend, DType act, const Tensor& x, const Tensor& indices, const Tensor& out) {
  require(backend, x, act, 2, "gather input");
  require(backend, indices, DType::I32, 1, "gather indices");
  require(backend, out, act, 2, "gather output");
  require_contiguous(backend, x, "gather input");
  require_contiguous(backend, out, "gather output");
  CYPRIS_CHECK(out.shape[0] == indices.shape[0] && out.shape[1] == x.shape[1], "{}: gather shapes x {} out {}", backend,
               x.shape_str(), out.shape_str());
}

}  // namespace cypris::backend_checks
