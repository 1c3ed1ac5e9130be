#include "engine/loader/quant_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cstring>
#include <map>
#include <vector>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/loader/column_segments.h"
#include "engine/loader/dequant_rows.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weight_names.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant/wq_pack.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

class QuantizedWeightSource : public WeightSource {
 public:
  QuantizedWeightSource(const std::filesystem::path& dir, const QuantConfig& q, std::unique_ptr<WeightSource> plain)
      : dir_(dir), q_(q), plain_(std::move(plain)), ckpt_(dir) {}

  std::string describe() const override { return plain_->describe(); }

  bool contains(const std::string& name) const override { return is_quantized(name) || plain_->contains(name); }

  std::optional<DType> native_dtype(const std::string& name) const override {
    if (!is_quantized(name)) return plain_->native_dtype(name);
    // Act-order (g_idx out of order): blocks in the checkpoint's column order would mix groups; the
    // layer is kept quantized over its columns sorted by group (column_segments), or, where a
    // shard's columns do not cut into whole blocks, read dequantized to --dtype.
    if (act_order(name)) return std::nullopt;
    const auto shape = qweight_logical_shape(name);
    return quant::wq_repack_type(q_.bits, group_of(shape[1]), shape[1]);
  }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    if (!is_quantized(name)) return plain_->read_into(name, full_shape, dtype, shard, dst);
    CYPRIS_CHECK(full_shape.size() == 2, "{}: quantized layer '{}' read with shape {}; it is a matrix", dir_.string(),
                 name, shape_str(full_shape));
    const quant::WqLayer l = open_layer(name, full_shape[0], full_shape[1]);
    const std::vector<int64_t> local = shard_shape(name, full_shape, shard);
    int64_t n0 = 0, k0 = 0;
    if (shard.dim == 0) n0 = shard.rank * local[0];
    if (shard.dim == 1) k0 = shard.rank * local[1];
    const int64_t n1 = n0 + local[0], k1 = k0 + local[1];
    const int64_t row_bytes = static_cast<int64_t>(dtype_nbytes(dtype, local[1]));
    if (dtype_is_quantized(dtype)) {
      const std::optional<DType> native = native_dtype(name);
      CYPRIS_CHECK(native.has_value(),
                   "{}: layer '{}' is act-order GPTQ (g_idx out of order): its blocks hold the columns sorted by "
                   "group (read as column segments) or it is read dequantized, not whole as {}",
                   file_of(prefix(name) + ".g_idx"), prefix(name), dtype_name(dtype));
      CYPRIS_CHECK(dtype == *native, "{}: quantized layer '{}' is kept as {}, not {}", dir_.string(), name,
                   dtype_name(*native), dtype_name(dtype));
      const int block = static_cast<int>(dtype_block(dtype).elems);
      const int64_t mixed = quant::wq_first_mixed_block(l, block);
      CYPRIS_CHECK(mixed < 0,
                   "{}: tensor '{}.g_idx': input columns {}..{} belong to different groups (act-order, desc_act "
                   "true); such layers are read as column segments (sorted by group)",
                   file_of(prefix(name) + ".g_idx"), prefix(name), mixed, mixed + block - 1);
      shared_thread_pool().parallel_for(
          n1 - n0,
          [&](int64_t r0, int64_t r1) {
            quant::wq_repack(l, dtype, n0 + r0, n0 + r1, k0, k1, static_cast<char*>(dst) + r0 * row_bytes);
          },
          16);
      return;
    }
    CYPRIS_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
                 "{}: quantized layer '{}' cannot be read as {}", dir_.string(), name, dtype_name(dtype));
    write_dequantized_rows(dtype, dst, n1 - n0, k1 - k0,
                           [&](int64_t r, float* row) { quant::wq_dequantize(l, n0 + r, n0 + r + 1, k0, k1, row); });
  }

  // Act-order GPTQ: the shard's input columns sorted by g_idx (stable), so that each group is
  // contiguous; one segment in W4/W8 blocks of 128 or 32 columns. A row-parallel shard whose share
  // of some group is not a whole number of 32 columns has none (read dequantized; logged).
  std::vector<ColumnSegment> column_segments(const std::string& name, const std::vector<int64_t>& full_shape,
                                             const ShardSpec& shard) const override {
    if (!is_quantized(name) || full_shape.size() != 2 || !act_order(name)) return {};
    const quant::WqLayer l = open_layer(name, full_shape[0], full_shape[1]);
    const std::vector<int64_t> local = shard_shape(name, full_shape, shard);
    const int64_t k0 = shard.dim == 1 ? shard.rank * local[1] : 0;
    std::vector<int32_t> cols = sorted_columns(k0, k0 + local[1], l.g_idx);
    std::vector<int32_t> group_at(cols.size());
    for (size_t i = 0; i < cols.size(); ++i) group_at[i] = l.g_idx[k0 + cols[i]];
    const std::optional<std::vector<SegmentCut>> cuts =
        cut_column_segments(group_at, std::vector<int>(cols.size(), l.bits));
    if (!cuts || cuts->size() != 1) {
      LOG_WARN(
          "{}: act-order layer '{}': the input columns {}..{} of this rank do not hold whole 32-column pieces "
          "of each group; this layer is read dequantized to --dtype (16-bit in memory)",
          file_of(prefix(name) + ".g_idx"), prefix(name), k0, k0 + local[1] - 1);
      return {};
    }
    if (!logged_act_order_.exchange(true)) {
      LOG_INFO(
          "{}: act-order GPTQ layers (first: {}) kept quantized: input columns sorted by group at load, the "
          "activations gathered in that order before each product",
          dir_.string(), prefix(name));
    }
    const int block = cuts->front().block;
    ColumnSegment seg;
    seg.dtype =
        l.bits == 8 ? (block == 128 ? DType::W8G128 : DType::W8G32) : (block == 128 ? DType::W4G128 : DType::W4G32);
    seg.columns = std::move(cols);
    return {seg};
  }

  void read_segment(const std::string& name, const std::vector<int64_t>& full_shape, const ShardSpec& shard,
                    size_t index, void* dst) const override {
    const std::vector<ColumnSegment> segs = column_segments(name, full_shape, shard);
    CYPRIS_CHECK(index < segs.size(), "{}: layer '{}' has {} column segments, not {}", dir_.string(), name, segs.size(),
                 index + 1);
    const quant::WqLayer l = open_layer(name, full_shape[0], full_shape[1]);
    read_column_segment(segs[index], shard_shape(name, full_shape, shard), shard, dst,
                        [&](int64_t row_begin, int64_t row_end, const int32_t* cols, int64_t ncols, char* out) {
                          quant::wq_repack_columns(l, segs[index].dtype, row_begin, row_end, cols, ncols, out);
                        });
  }

 private:
  std::string prefix(const std::string& name) const { return layer_prefix(name); }

  bool is_quantized(const std::string& name) const {
    const std::string p = layer_prefix(name);
    return !p.empty() && ckpt_.find(p + packed_name()) != nullptr;
  }

  // True when the layer's g_idx is not k / group (GPTQ act-order).
  bool act_order(const std::string& name) const {
    const SafetensorsTensor* g = ckpt_.find(prefix(name) + ".g_idx");
    if (g == nullptr || q_.method != "gptq" || g->dtype_name != "I32" || g->shape.size() != 1) return false;
    const int64_t in = g->shape[0];
    const int64_t group = group_of(in);
    const auto* idx = reinterpret_cast<const int32_t*>(g->data);
    bool in_order = true;
    for (int64_t k = 0; k < in && in_order; ++k) in_order = idx[k] == k / group;
    return !in_order;
  }

  std::string file_of(const std::string& tensor) const {
    const SafetensorsFile* f = nullptr;
    ckpt_.find(tensor, &f);
    return f ? f->path().string() : dir_.string();
  }

  int64_t group_of(int64_t in) const { return q_.group_size > 0 ? q_.group_size : in; }
  bool packed_int() const { return q_.method == "compressed-tensors"; }
  bool marlin() const { return q_.checkpoint_format == "marlin"; }
  // The tensor holding a layer's packed values.
  std::string packed_name() const { return packed_int() ? ".weight_packed" : marlin() ? ".B" : ".qweight"; }

  // [out, in] of a quantized layer from its qweight alone (before the config's shape is known).
  std::vector<int64_t> qweight_logical_shape(const std::string& name) const {
    const std::string packed = prefix(name) + packed_name();
    const SafetensorsTensor* t = ckpt_.find(packed);
    CYPRIS_CHECK(t->shape.size() == 2, "{}: tensor '{}' has shape {}; it must be a matrix", file_of(packed), packed,
                 shape_str(t->shape));
    if (q_.method == "awq") return {t->shape[1] * 8, t->shape[0]};
    if (packed_int()) return {t->shape[0], t->shape[1] * (32 / q_.bits)};
    if (marlin()) return {t->shape[1] / 2, t->shape[0] * 16};  // B [in / 16, out * 2]
    CYPRIS_CHECK(t->shape[0] * 32 % q_.bits == 0,
                 "{}: tensor '{}' has {} rows; {}-bit GPTQ packs 32 values in {} of them", file_of(packed), packed,
                 t->shape[0], q_.bits, q_.bits);
    return {t->shape[1], t->shape[0] * 32 / q_.bits};  // 3 bits: 32 values in 3 words
  }

  const SafetensorsTensor& tensor(const std::string& name, const std::string& dtype_name,
                                  const std::vector<int64_t>& shape, const std::string& why) const {
    const SafetensorsFile* f = nullptr;
    const SafetensorsTensor* t = ckpt_.find(name, &f);
    CYPRIS_CHECK(t != nullptr, "{}: tensor '{}' not found; a {} layer needs it ({})", dir_.string(), name, q_.method,
                 why);
    CYPRIS_CHECK(t->dtype_name == dtype_name, "{}: tensor '{}' has dtype {}; {} needs {}", f->path().string(), name,
                 t->dtype_name, q_.summary(), dtype_name);
    CYPRIS_CHECK(t->shape == shape, "{}: tensor '{}' has shape {} but {} needs {} ({})", f->path().string(), name,
                 shape_str(t->shape), q_.summary(), shape_str(shape), why);
    return *t;
  }

  // The layer's tensors, checked against the config and the [out, in] the model expects.
  quant::WqLayer open_layer(const std::string& name, int64_t out, int64_t in) const {
    const std::string p = prefix(name);
    if (packed_int()) return open_packed_int(p, out, in);
    if (marlin()) return open_marlin(p, out, in);
    const std::string what = fmt::format("a [{}, {}] layer", out, in);
    quant::WqLayer l;
    l.layout = q_.method == "awq" ? quant::WqLayout::Awq : quant::WqLayout::Gptq;
    l.bits = q_.bits;
    l.in = in;
    l.out = out;
    l.group = group_of(in);
    l.zero_plus_one = q_.zero_point_plus_one;
    const int per = 32 / q_.bits;
    CYPRIS_CHECK(in % l.group == 0,
                 "{}: layer '{}' has {} input columns, not a whole number of groups of {} ({}: group_size)",
                 file_of(p + ".qweight"), p, in, l.group, q_.source);
    const int64_t groups = in / l.group;
    if (l.layout == quant::WqLayout::Awq) {
      CYPRIS_CHECK(out % 8 == 0, "{}: AWQ layer '{}' has {} outputs; AWQ packs 8 per int32", file_of(p + ".qweight"), p,
                   out);
      l.qweight = reinterpret_cast<const int32_t*>(tensor(p + ".qweight", "I32", {in, out / 8}, what).data);
      l.qzeros = reinterpret_cast<const int32_t*>(tensor(p + ".qzeros", "I32", {groups, out / 8}, what).data);
    } else {
      // Values per packing unit: 32 / bits in a word, or 32 in 3 words for 3 bits.
      const int unit = q_.bits == 3 ? 32 : per;
      CYPRIS_CHECK(in % unit == 0 && out % unit == 0,
                   "{}: GPTQ layer '{}' is [{}, {}]; {}-bit GPTQ packs {} values per {} along both",
                   file_of(p + ".qweight"), p, out, in, q_.bits, unit, q_.bits == 3 ? "3 int32" : "int32");
      l.qweight =
          reinterpret_cast<const int32_t*>(tensor(p + ".qweight", "I32", {in * q_.bits / 32, out}, what).data);
      l.qzeros =
          reinterpret_cast<const int32_t*>(tensor(p + ".qzeros", "I32", {groups, out * q_.bits / 32}, what).data);
    }
    l.scales = reinterpret_cast<const uint16_t*>(tensor(p + ".scales", "F16", {groups, out}, what).data);
    if (l.layout == quant::WqLayout::Gptq && ckpt_.find(p + ".g_idx") != nullptr) {
      const SafetensorsTensor& g = tensor(p + ".g_idx", "I32", {in}, what);
      l.g_idx = reinterpret_cast<const int32_t*>(g.data);
      for (int64_t k = 0; k < in; ++k) {
        CYPRIS_CHECK(l.g_idx[k] >= 0 && l.g_idx[k] < groups,
                     "{}: tensor '{}.g_idx'[{}] = {} is not a group of the layer (0..{})", file_of(p + ".g_idx"), p, k,
                     l.g_idx[k], groups - 1);
      }
      // Without act-order g_idx is k / group: read it as that (the same values, no lookup).
      bool plain = true;
      for (int64_t k = 0; k < in && plain; ++k) plain = l.g_idx[k] == k / l.group;
      if (plain) l.g_idx = nullptr;
    }
    return l;
  }

  // Marlin's format (GPTQ checkpoint_format marlin): B [in / 16, out * 2] int32 in Marlin's tile and
  // fragment order, s [groups, out] fp16 in its scale order (kernels/cpu/quant/wq_pack.h); symmetric.
  quant::WqLayer open_marlin(const std::string& p, int64_t out, int64_t in) const {
    const std::string what = fmt::format("a [{}, {}] layer in Marlin's format", out, in);
    quant::WqLayer l;
    l.layout = quant::WqLayout::Marlin;
    l.bits = 4;
    l.in = in;
    l.out = out;
    l.group = group_of(in);
    // Marlin permutes runs of 1024 values of a row of 16 x 16 tiles: 16 inputs by 64 outputs.
    CYPRIS_CHECK(in % 16 == 0 && out % 64 == 0 && in % l.group == 0,
                 "{}: Marlin layer '{}' is [{}, {}]; Marlin's format needs the inputs a multiple of 16 and of the "
                 "group size {}, the outputs a multiple of 64",
                 file_of(p + ".B"), p, out, in, l.group);
    l.qweight = reinterpret_cast<const int32_t*>(tensor(p + ".B", "I32", {in / 16, out * 2}, what).data);
    l.scales = reinterpret_cast<const uint16_t*>(tensor(p + ".s", "F16", {in / l.group, out}, what).data);
    return l;
  }

  // compressed-tensors pack-quantized: weight_packed, weight_scale (the model's dtype, kept exactly
  // as fp16), weight_zero_point when asymmetric.
  quant::WqLayer open_packed_int(const std::string& p, int64_t out, int64_t in) const {
    const std::string what = fmt::format("a [{}, {}] layer", out, in);
    quant::WqLayer l;
    l.layout = quant::WqLayout::PackedInt;
    l.bits = q_.bits;
    l.in = in;
    l.out = out;
    l.group = group_of(in);
    const int per = 32 / q_.bits;
    CYPRIS_CHECK(in % l.group == 0 && in % per == 0,
                 "{}: layer '{}' has {} input columns, not a whole number of groups of {} ({}: group_size)",
                 file_of(p + ".weight_packed"), p, in, l.group, q_.source);
    const int64_t groups = in / l.group;
    l.qweight = reinterpret_cast<const int32_t*>(tensor(p + ".weight_packed", "I32", {out, in / per}, what).data);
    if (!q_.sym) {
      CYPRIS_CHECK(out % per == 0, "{}: layer '{}' has {} outputs; its zero points pack {} per int32",
                   file_of(p + ".weight_packed"), p, out, per);
      l.qzeros =
          reinterpret_cast<const int32_t*>(tensor(p + ".weight_zero_point", "I32", {out / per, groups}, what).data);
    }
    const SafetensorsFile* f = nullptr;
    const SafetensorsTensor* sc = ckpt_.find(p + ".weight_scale", &f);
    CYPRIS_CHECK(sc != nullptr, "{}: tensor '{}.weight_scale' not found; a {} layer needs it", dir_.string(), p,
                 q_.method);
    CYPRIS_CHECK(sc->dtype.has_value(), "{}: tensor '{}.weight_scale' has dtype {}; allowed: F16, BF16, F32",
                 f->path().string(), p, sc->dtype_name);
    const std::vector<int64_t> want = {out, groups};
    CYPRIS_CHECK(sc->shape == want, "{}: tensor '{}.weight_scale' has shape {} but {} needs {} ({})",
                 f->path().string(), p, shape_str(sc->shape), q_.summary(), shape_str(want), what);
    if (*sc->dtype == DType::F16) {
      l.scales = reinterpret_cast<const uint16_t*>(sc->data);
      return l;
    }
    // bf16 / fp32 scales: the blocks hold fp16; every checkpoint scale must convert exactly.
    auto& store = scale_store_[p];
    store.resize(static_cast<size_t>(out * groups));
    std::vector<float> f32(store.size());
    convert_to_f32(sc->data, *sc->dtype, f32.data(), static_cast<int64_t>(f32.size()));
    for (size_t i = 0; i < store.size(); ++i) {
      store[i] = f32_to_f16(f32[i]);
      CYPRIS_CHECK(f16_to_f32(store[i]) == f32[i],
                   "{}: tensor '{}.weight_scale'[{}] = {} is not exact in fp16; such scales are not supported yet",
                   f->path().string(), p, i, f32[i]);
    }
    l.scales = store.data();
    return l;
  }

  std::filesystem::path dir_;
  QuantConfig q_;
  std::unique_ptr<WeightSource> plain_;
  SafetensorsCheckpoint ckpt_;
  mutable std::atomic<bool> logged_act_order_{false};
  // fp16 copies of non-fp16 scales, per layer (each rank's source is used by one thread).
  mutable std::map<std::string, std::vector<uint16_t>> scale_store_;
};

}  // namespace

std::unique_ptr<WeightSource> make_quantized_weight_source(const std::filesystem::path& dir, const QuantConfig& q,
                                                           std::unique_ptr<WeightSource> plain) {
  return std::make_unique<QuantizedWeightSource>(dir, q, std::move(plain));
}

}  // namespace cypris
