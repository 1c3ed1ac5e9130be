#include "models/layers/weight_loader.h"

#include <cstring>
#include <numeric>
#include <optional>
#include <type_traits>

#include "engine/common/error.h"
#include "engine/backend/communicator.h"
#include "engine/backend/tp_workers.h"

namespace cypris {

TpLayout make_tp_layout(const ModelConfig& cfg, const ModelBuildOptions& opt) {
  const int tp = opt.parallel.world_size;
  const int rank = opt.parallel.rank;
  check_tensor_parallel(cfg, tp);
  CYPRIS_CHECK(rank >= 0 && rank < tp, "tensor parallel rank {} outside world size {}", rank, tp);
  CYPRIS_CHECK(tp == 1 || (opt.comm && opt.comm->world_size() == tp && opt.comm->rank() == rank),
               "tensor parallel rank {} of {} needs a communicator of the same rank and size", rank, tp);
  TpLayout l;
  l.rank = rank;
  l.world_size = tp;
  l.heads = cfg.num_attention_heads / tp;
  l.kv_heads = kv_heads_per_rank(cfg.num_key_value_heads, tp);
  l.head_dim = cfg.head_dim;
  l.rows = ShardSpec::split(0, rank, tp);
  l.cols = ShardSpec::split(1, rank, tp);
  // K and V: this rank's heads, or the one head it shares with others when they are replicated.
  const int kv_total = cfg.num_key_value_heads;
  l.kv_rows = kv_total >= tp ? l.rows : ShardSpec::split(0, first_kv_head(kv_total, rank, tp), kv_total);
  return l;
}

WeightLoader::WeightLoader(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                           const ModelBuildOptions& opt)
    : cfg_(cfg), weights_(weights), backend_(backend), opt_(opt) {}

std::string WeightLoader::resolve(const std::string& name) const {
  if (weights_.contains(name)) return name;
  const std::string bare = name.rfind("model.", 0) == 0 ? name.substr(6) : name;
  if (weights_.contains(bare)) return bare;
  CYPRIS_FAIL("{}: tensor '{}' not found in the checkpoint (needed by {})", weights_.describe(), name,
              cfg_.architectures.front());
}

bool WeightLoader::contains(const std::string& name) const {
  return weights_.contains(name) || (name.rfind("model.", 0) == 0 && weights_.contains(name.substr(6)));
}

DeviceTensor WeightLoader::load_f32(const std::string& name, const std::vector<int64_t>& shape, float offset,
                                    ShardSpec shard) const {
  HostTensor t = weights_.load(resolve(name), shape, DType::F32, shard);
  if (offset != 0.0f) {
    float* p = t.buffer.as<float>();
    for (int64_t i = 0, n = t.view().numel(); i < n; ++i) p[i] += offset;
  }
  return backend_.upload_weight(std::move(t));
}

void WeightLoader::read_rows(const std::string& name, int64_t full_rows, int64_t cols, int64_t row0, int64_t n,
                             DType dtype, void* dst) const {
  const std::vector<int64_t> full = cols > 0 ? std::vector<int64_t>{full_rows, cols} : std::vector<int64_t>{full_rows};
  const size_t row_bytes = dtype_nbytes(dtype, cols > 0 ? cols : 1);
  // Shard specs address equal parts of dim 0: read in chunks of gcd(full, row0, n) rows.
  const int64_t chunk = std::gcd(std::gcd(full_rows, row0), n);
  CYPRIS_CHECK(chunk > 0 && row0 + n <= full_rows, "{}: rows [{}, {}) of tensor '{}' outside its {} rows",
               weights_.describe(), row0, row0 + n, name, full_rows);
  for (int64_t r = row0; r < row0 + n; r += chunk) {
    weights_.read_into(name, full, dtype,
                       ShardSpec::split(0, static_cast<int>(r / chunk), static_cast<int>(full_rows / chunk)),
                       static_cast<char*>(dst) + row_bytes * static_cast<size_t>(r - row0));
  }
}

namespace {

// Rows [first, first + count) a part contributes on this rank.
std::pair<int64_t, int64_t> part_rows(const LinearPart& p) {
  const int64_t base = p.row0 >= 0 ? p.row0 : 0;
  const int64_t total = p.row_count >= 0 ? p.row_count : p.full_rows;
  if (p.shard.dim != 0) return {base, total};
  CYPRIS_CHECK(total % p.shard.world_size == 0, "tensor '{}': {} rows do not split over {} parts", p.name, total,
               p.shard.world_size);
  const int64_t per = total / p.shard.world_size;
  return {base + per * p.shard.rank, per};
}

}  // namespace

DType WeightLoader::linear_dtype(const std::string& resolved_name) const {
  const std::optional<DType> native = weights_.native_dtype(resolved_name);
  if (native && dtype_is_quantized(*native) && backend_.supports_quantized_weight(*native)) return *native;
  return opt_.weight_dtype;
}

DType WeightLoader::merged_linear_dtype(const std::vector<LinearPart>& parts, const std::vector<std::string>& names,
                                        int64_t cols) const {
  // A merged weight stays in the checkpoint's quantized type (GGUF) when every part has the same
  // one and this rank's rows are whole blocks; otherwise the source dequantizes to --dtype.
  DType dtype = linear_dtype(names.front());
  for (size_t i = 1; i < names.size() && dtype_is_quantized(dtype); ++i) {
    if (linear_dtype(names[i]) != dtype) dtype = opt_.weight_dtype;
  }
  const int64_t row_len = parts.size() == 1 && parts[0].shard.dim == 1 ? cols / parts[0].shard.world_size : cols;
  if (dtype_is_quantized(dtype) && row_len % dtype_block(dtype).elems != 0) dtype = opt_.weight_dtype;
  return dtype;
}

std::vector<std::vector<LinearPart>> WeightLoader::same_dtype_runs(const std::vector<LinearPart>& parts,
                                                                   int64_t cols) const {
  std::vector<DType> dtypes;
  for (const LinearPart& p : parts) {
    const DType d = linear_dtype(resolve(p.name));
    if (!dtype_is_quantized(d) || p.shard.dim == 1 || cols % dtype_block(d).elems != 0) return {parts};
    dtypes.push_back(d);
  }
  std::vector<std::vector<LinearPart>> runs;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i == 0 || dtypes[i] != dtypes[i - 1]) runs.emplace_back();
    runs.back().push_back(parts[i]);
  }
  return runs;
}

std::optional<DeviceTensor> WeightLoader::dummy_linear(const std::vector<LinearPart>& parts,
                                                       const std::vector<std::string>& names, int64_t cols,
                                                       DType dtype) const {
  if (dtype_is_quantized(dtype)) return std::nullopt;
  std::vector<DummyFill> runs;
  // Row-parallel: one tensor split along its input dimension; each row is one run.
  if (parts.size() == 1 && parts[0].shard.dim == 1) {
    const LinearPart& p = parts[0];
    std::optional<DummyFill> f = weights_.dummy_fill(names[0], {p.full_rows, cols});
    if (!f) return std::nullopt;
    const std::vector<int64_t> shape = shard_shape(names[0], {p.full_rows, cols}, p.shard);
    f->rows = shape[0];
    f->row_len = shape[1];
    f->src_offset = p.shard.rank * shape[1];
    f->src_row_stride = cols;
    runs.push_back(*f);
    return backend_.dummy_weight(dtype, shape, runs);
  }
  // Column-parallel / merged: each part's rows are one contiguous run of its tensor.
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const LinearPart& p = parts[i];
    std::optional<DummyFill> f = weights_.dummy_fill(names[i], {p.full_rows, cols});
    if (!f) return std::nullopt;
    const auto [first, count] = part_rows(p);
    CYPRIS_CHECK(first >= 0 && first + count <= p.full_rows, "{}: rows [{}, {}) of tensor '{}' outside its {} rows",
                 weights_.describe(), first, first + count, names[i], p.full_rows);
    f->dst_offset = offset * cols;
    f->rows = 1;
    f->row_len = count * cols;
    f->src_offset = first * cols;
    f->src_row_stride = f->row_len;
    runs.push_back(*f);
    offset += count;
  }
  return backend_.dummy_weight(dtype, {offset, cols}, runs);
}

DeviceTensor WeightLoader::load_linear(const std::vector<LinearPart>& parts, int64_t cols) const {
  CYPRIS_CHECK(!parts.empty(), "load_linear: no parts");
  std::vector<std::string> names;
  for (const LinearPart& p : parts) names.push_back(resolve(p.name));
  if (auto t = dummy_linear(parts, names, cols, merged_linear_dtype(parts, names, cols))) return std::move(*t);
  return backend_.upload_weight(load_linear_host(parts, cols));
}

std::vector<LinearSegment> WeightLoader::load_linear_segments(const LinearPart& part, int64_t cols) const {
  if (part.row0 >= 0) return {};  // a slice of a fused tensor: read whole
  const std::string name = resolve(part.name);
  const std::vector<int64_t> full = {part.full_rows, cols};
  const std::vector<ColumnSegment> segs = weights_.column_segments(name, full, part.shard);
  for (const ColumnSegment& s : segs) {
    if (!backend_.supports_quantized_weight(s.dtype)) return {};
  }
  const std::vector<int64_t> local = shard_shape(name, full, part.shard);
  std::vector<LinearSegment> out;
  for (size_t i = 0; i < segs.size(); ++i) {
    const auto k = static_cast<int64_t>(segs[i].columns.size());
    HostTensor w;
    w.dtype = segs[i].dtype;
    w.shape = {local[0], k};
    w.buffer = Buffer(dtype_nbytes(w.dtype, local[0] * k));
    weights_.read_segment(name, full, part.shard, i, w.buffer.data());
    HostTensor c;
    c.dtype = DType::I32;
    c.shape = {k};
    c.buffer = Buffer(static_cast<size_t>(k) * sizeof(int32_t));
    std::memcpy(c.buffer.data(), segs[i].columns.data(), c.buffer.size());
    out.push_back({backend_.upload_weight(std::move(w)), backend_.upload_weight(std::move(c))});
  }
  return out;
}

DeviceTensor WeightLoader::load_replicated(const std::string& name, const std::vector<int64_t>& shape,
                                           DType dtype) const {
  const std::string resolved = resolve(name);
  if (std::optional<DummyFill> f = weights_.dummy_fill(resolved, shape)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    f->rows = 1;
    f->row_len = n;
    f->src_row_stride = n;
    if (auto t = backend_.dummy_weight(dtype, shape, {*f})) return std::move(*t);
  }
  return backend_.upload_weight(weights_.load(resolved, shape, dtype));
}

HostTensor WeightLoader::load_linear_host(const std::vector<LinearPart>& parts, int64_t cols) const {
  CYPRIS_CHECK(!parts.empty(), "load_linear: no parts");
  std::vector<std::string> names;
  for (const LinearPart& p : parts) names.push_back(resolve(p.name));
  const DType dtype = merged_linear_dtype(parts, names, cols);
  // Row-parallel: one tensor split along its input dimension.
  if (parts.size() == 1 && parts[0].shard.dim == 1) {
    return weights_.load(names[0], {parts[0].full_rows, cols}, dtype, parts[0].shard);
  }
  int64_t rows = 0;
  for (const LinearPart& p : parts) rows += part_rows(p).second;
  HostTensor out;
  out.dtype = dtype;
  out.shape = {rows, cols};
  out.buffer = Buffer(dtype_nbytes(dtype, rows * cols));
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const LinearPart& p = parts[i];
    const auto [first, count] = part_rows(p);
    char* dst = static_cast<char*>(out.buffer.data()) + dtype_nbytes(dtype, offset * cols);
    if (p.row0 < 0 && (p.shard.dim < 0 || p.shard.dim == 0)) {
      weights_.read_into(names[i], {p.full_rows, cols}, dtype, p.shard, dst);
    } else {
      read_rows(names[i], p.full_rows, cols, first, count, dtype, dst);
    }
    offset += count;
  }
  return out;
}

HostTensor WeightLoader::load_rows_f32_host(const LinearPart& part, int64_t cols) const {
  const auto [first, count] = part_rows(part);
  HostTensor t;
  t.dtype = DType::F32;
  t.shape = {count, cols};
  t.buffer = Buffer(static_cast<size_t>(count * cols) * sizeof(float));
  read_rows(resolve(part.name), part.full_rows, cols, first, count, DType::F32, t.buffer.data());
  return t;
}

DeviceTensor WeightLoader::load_stacked_bias(const std::vector<LinearPart>& parts) const {
  int64_t rows = 0;
  for (const LinearPart& p : parts) rows += part_rows(p).second;
  HostTensor out;
  out.dtype = DType::F32;
  out.shape = {rows};
  out.buffer = Buffer(static_cast<size_t>(rows) * sizeof(float));
  int64_t offset = 0;
  for (const LinearPart& p : parts) {
    const auto [first, count] = part_rows(p);
    read_rows(resolve(p.name), p.full_rows, 0, first, count, DType::F32, out.buffer.as<float>() + offset);
    offset += count;
  }
  return backend_.upload_weight(std::move(out));
}

HostTensor WeightLoader::load_vocab_rows(const std::string& hf_name, int64_t vocab_start, int64_t vocab_count,
                                         int64_t alloc_rows, DType wd) const {
  const int64_t h = cfg_.hidden_size;
  const std::string name = resolve(hf_name);
  HostTensor t;
  t.dtype = wd;
  t.shape = {alloc_rows, h};
  t.buffer = Buffer(dtype_nbytes(wd, alloc_rows * h));
  std::memset(t.buffer.data(), 0, t.buffer.size());
  if (vocab_count > 0) read_rows(name, cfg_.vocab_size, h, vocab_start, vocab_count, wd, t.buffer.data());
  return t;
}

}  // namespace cypris
