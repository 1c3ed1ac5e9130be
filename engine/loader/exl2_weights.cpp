#include "engine/loader/exl2_weights.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/loader/column_segments.h"
#include "engine/loader/dequant_rows.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weight_names.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant/exl2_layout.h"

namespace cypris {
namespace {

// "8-bit x 32, 4-bit x 96": the groups' widths and input rows, for messages.
std::string groups_str(const std::vector<quant::Exl2Group>& groups) {
  std::string out;
  for (const quant::Exl2Group& g : groups) out += fmt::format("{}{}-bit x {}", out.empty() ? "" : ", ", g.bits, g.rows);
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class Exl2WeightSource : public WeightSource {
 public:
  Exl2WeightSource(const std::filesystem::path& dir, const QuantConfig& q, std::unique_ptr<WeightSource> plain)
      : dir_(dir), q_(q), plain_(std::move(plain)), ckpt_(dir) {}

  std::string describe() const override { return plain_->describe(); }
  bool contains(const std::string& name) const override { return is_quantized(name) || plain_->contains(name); }
  // Read whole, quantized layers are dequantized to the model's dtype: nullopt. A linear layer is
  // kept at its bits through column_segments instead.
  std::optional<DType> native_dtype(const std::string& name) const override {
    return is_quantized(name) ? std::nullopt : plain_->native_dtype(name);
  }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    if (!is_quantized(name)) return plain_->read_into(name, full_shape, dtype, shard, dst);
    CYPRIS_CHECK(full_shape.size() == 2, "{}: quantized layer '{}' read with shape {}; it is a matrix", dir_.string(),
                 name, shape_str(full_shape));
    CYPRIS_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
                 "{}: EXL2 layer '{}' is read dequantized (float32, float16 or bfloat16), not as {}", dir_.string(),
                 name, dtype_name(dtype));
    const quant::Exl2Layer& l = layer(layer_prefix(name), full_shape[0], full_shape[1]);
    const std::vector<int64_t> local = shard_shape(name, full_shape, shard);
    int64_t n0 = 0, k0 = 0;
    if (shard.dim == 0) n0 = shard.rank * local[0];
    if (shard.dim == 1) k0 = shard.rank * local[1];
    const int64_t n1 = n0 + local[0], k1 = k0 + local[1];
    write_dequantized_rows(dtype, dst, n1 - n0, k1 - k0,
                           [&](int64_t r, float* row) { quant::exl2_dequantize(l, n0 + r, n0 + r + 1, k0, k1, row); });
  }

  // Kept at its bits: the shard's inputs in the packed (act-order) order, cut into runs of groups of
  // 2-4 bits (W4 blocks) and of 5-8 bits (W8 blocks), 128-value blocks where every group's share
  // is a multiple of 128, else 32. None (read dequantized, logged) when a group's share of the
  // shard is not a whole number of 32 inputs.
  std::vector<ColumnSegment> column_segments(const std::string& name, const std::vector<int64_t>& full_shape,
                                             const ShardSpec& shard) const override {
    if (!is_quantized(name) || full_shape.size() != 2) return {};
    const quant::Exl2Layer& l = layer(layer_prefix(name), full_shape[0], full_shape[1]);
    const std::vector<int64_t> local = shard_shape(name, full_shape, shard);
    const int64_t k0 = shard.dim == 1 ? shard.rank * local[1] : 0;
    std::vector<int32_t> cols = sorted_columns(k0, k0 + local[1], l.invperm.data());
    std::vector<int32_t> group_at(cols.size());
    std::vector<int> kind_at(cols.size());
    for (size_t i = 0; i < cols.size(); ++i) {
      group_at[i] = l.group_of_row[static_cast<size_t>(l.invperm[static_cast<size_t>(k0 + cols[i])])];
      kind_at[i] = l.groups[static_cast<size_t>(group_at[i])].bits <= 4 ? 4 : 8;
    }
    const std::optional<std::vector<SegmentCut>> cuts = cut_column_segments(group_at, kind_at);
    if (!cuts) {
      LOG_WARN(
          "{}: EXL2 layer '{}': the inputs {}..{} of this rank do not hold whole 32-input pieces of each group "
          "({}); this layer is read dequantized to --dtype (16-bit in memory)",
          file_of(layer_prefix(name) + ".q_weight"), layer_prefix(name), k0, k0 + local[1] - 1, groups_str(l.groups));
      return {};
    }
    std::vector<ColumnSegment> segs;
    for (const SegmentCut& c : *cuts) {
      ColumnSegment seg;
      seg.dtype = c.kind == 8 ? (c.block == 128 ? DType::W8G128 : DType::W8G32)
                              : (c.block == 128 ? DType::W4G128 : DType::W4G32);
      seg.columns.assign(cols.begin() + c.begin, cols.begin() + c.end);
      segs.push_back(std::move(seg));
    }
    return segs;
  }

  void read_segment(const std::string& name, const std::vector<int64_t>& full_shape, const ShardSpec& shard,
                    size_t index, void* dst) const override {
    const std::vector<ColumnSegment> segs = column_segments(name, full_shape, shard);
    CYPRIS_CHECK(index < segs.size(), "{}: EXL2 layer '{}' has {} column segments, not {}", dir_.string(), name,
                 segs.size(), index + 1);
    const quant::Exl2Layer& l = layer(layer_prefix(name), full_shape[0], full_shape[1]);
    read_column_segment(segs[index], shard_shape(name, full_shape, shard), shard, dst,
                        [&](int64_t row_begin, int64_t row_end, const int32_t* cols, int64_t ncols, char* out) {
                          quant::exl2_repack_columns(l, segs[index].dtype, row_begin, row_end, cols, ncols, out);
                        });
  }

 private:
  bool is_quantized(const std::string& name) const {
    const std::string p = layer_prefix(name);
    return !p.empty() && ckpt_.find(p + ".q_weight") != nullptr;
  }

  std::string file_of(const std::string& tensor) const {
    const SafetensorsFile* f = nullptr;
    ckpt_.find(tensor, &f);
    return f ? f->path().string() : dir_.string();
  }

  const SafetensorsTensor& tensor(const std::string& name, const std::string& dtype_name,
                                  const std::vector<int64_t>& shape, const std::string& why) const {
    const SafetensorsFile* f = nullptr;
    const SafetensorsTensor* t = ckpt_.find(name, &f);
    CYPRIS_CHECK(t != nullptr, "{}: tensor '{}' not found; an EXL2 layer needs it ({})", dir_.string(), name, why);
    CYPRIS_CHECK(t->dtype_name == dtype_name, "{}: tensor '{}' has dtype {}; EXL2 needs {}", f->path().string(), name,
                 t->dtype_name, dtype_name);
    CYPRIS_CHECK(t->shape == shape, "{}: tensor '{}' has shape {} but EXL2 needs {} ({})", f->path().string(), name,
                 shape_str(t->shape), shape_str(shape), why);
    return *t;
  }

  // A tensor of one dimension whose length is read from the file (checked against the others after).
  const SafetensorsTensor& vector_tensor(const std::string& name, const std::string& dtype_name) const {
    const SafetensorsFile* f = nullptr;
    const SafetensorsTensor* t = ckpt_.find(name, &f);
    CYPRIS_CHECK(t != nullptr, "{}: tensor '{}' not found; an EXL2 layer needs it", dir_.string(), name);
    CYPRIS_CHECK(t->dtype_name == dtype_name && t->shape.size() == 1 && t->shape[0] > 0,
                 "{}: tensor '{}' has dtype {} and shape {}; EXL2 needs {} [n] with n > 0", f->path().string(), name,
                 t->dtype_name, shape_str(t->shape), dtype_name);
    return *t;
  }

  // The layer's tensors checked against each other and the [out, in] the model expects; opened once
  // per layer (ranks and repeated reads share it).
  const quant::Exl2Layer& layer(const std::string& p, int64_t out, int64_t in) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = layers_.find(p);
    if (it != layers_.end()) {
      CYPRIS_CHECK(it->second.out == out && it->second.in == in, "{}: EXL2 layer '{}' read as [{}, {}] and [{}, {}]",
                   dir_.string(), p, it->second.out, it->second.in, out, in);
      return it->second;
    }
    return layers_.emplace(p, open_layer(p, out, in)).first->second;
  }

  quant::Exl2Layer open_layer(const std::string& p, int64_t out, int64_t in) const {
    const std::string what = fmt::format("a [{}, {}] layer", out, in);
    quant::Exl2Layer l;
    l.in = in;
    l.out = out;
    l.out_padded = (out + 31) / 32 * 32;
    // q_groups: (bits, first q_weight row) per group.
    const SafetensorsTensor& qg = vector_tensor(p + ".q_groups", "I16");
    const std::string qg_file = file_of(p + ".q_groups");
    CYPRIS_CHECK(qg.shape[0] % 2 == 0, "{}: tensor '{}.q_groups' has shape {}; EXL2 needs [2 * groups] (bits, row) pairs",
                 qg_file, p, shape_str(qg.shape));
    const int64_t groups = qg.shape[0] / 2;
    const auto* g16 = reinterpret_cast<const int16_t*>(qg.data);
    const std::string qw_file = file_of(p + ".q_weight");
    const SafetensorsTensor& qw = *ckpt_.find(p + ".q_weight");
    CYPRIS_CHECK(qw.dtype_name == "I32" && qw.shape.size() == 2 && qw.shape[1] == l.out_padded,
                 "{}: tensor '{}.q_weight' has dtype {} and shape {} but EXL2 needs I32 [rows, {}] ({}: outputs "
                 "rounded up to 32)",
                 qw_file, p, qw.dtype_name, shape_str(qw.shape), l.out_padded, what);
    const int64_t qrows = qw.shape[0];
    // As exllamav2 reads them: a group's rows follow from where the next group starts; the last
    // group holds the rest of the layer's inputs, and q_weight must end where its values end.
    int64_t row = 0, qrow = 0;
    for (int64_t g = 0; g < groups; ++g) {
      quant::Exl2Group grp;
      grp.bits = g16[2 * g];
      grp.qrow0 = g16[2 * g + 1];
      grp.row0 = row;
      CYPRIS_CHECK(grp.bits == 2 || grp.bits == 3 || grp.bits == 4 || grp.bits == 5 || grp.bits == 6 || grp.bits == 8,
                   "{}: tensor '{}.q_groups': group {} has {} bits; EXL2 groups have 2, 3, 4, 5, 6 or 8 bits", qg_file,
                   p, g, grp.bits);
      CYPRIS_CHECK(grp.qrow0 == qrow,
                   "{}: tensor '{}.q_groups': group {} starts at q_weight row {}, but the groups before it end at row {}",
                   qg_file, p, g, grp.qrow0, qrow);
      if (g + 1 < groups) {
        const int64_t span = static_cast<int64_t>(g16[2 * g + 3]) - grp.qrow0;
        CYPRIS_CHECK(span > 0 && span * 32 % grp.bits == 0,
                     "{}: tensor '{}.q_groups': group {} ({} bits) spans q_weight rows {}..{}, not a whole number of "
                     "{}-bit values per output",
                     qg_file, p, g, grp.bits, grp.qrow0, grp.qrow0 + span, grp.bits);
        grp.rows = span * 32 / grp.bits;
        CYPRIS_CHECK(row + grp.rows < in,
                     "{}: tensor '{}.q_groups': groups 0..{} already hold {} input rows but the layer has {} ({})",
                     qg_file, p, g, row + grp.rows, in, what);
      } else {
        grp.rows = in - row;
        CYPRIS_CHECK(grp.rows * grp.bits % 32 == 0,
                     "{}: tensor '{}.q_groups': the last group ({} bits) holds {} input rows, not a whole number of "
                     "32-bit words per output ({})",
                     qg_file, p, grp.bits, grp.rows, what);
      }
      row += grp.rows;
      qrow += grp.rows * grp.bits / 32;
      l.groups.push_back(grp);
    }
    CYPRIS_CHECK(qrows == qrow,
                 "{}: tensor '{}.q_weight' has shape {} but EXL2 needs [{}, {}] ({}, groups of {})", qw_file, p,
                 shape_str(qw.shape), qrow, l.out_padded, what, groups_str(l.groups));
    l.q_weight = reinterpret_cast<const uint32_t*>(qw.data);
    l.q_scale = reinterpret_cast<const uint32_t*>(
        tensor(p + ".q_scale", "I32", {groups, l.out_padded / 8}, what + ", one 4-bit scale per group and output").data);
    const SafetensorsTensor& qmax = tensor(p + ".q_scale_max", "F16", {groups}, "one per group");
    const auto* qmax16 = reinterpret_cast<const uint16_t*>(qmax.data);
    for (int64_t g = 0; g < groups; ++g) {
      const float v = f16_to_f32(qmax16[g]);
      CYPRIS_CHECK(std::isfinite(v) && v >= 0, "{}: tensor '{}.q_scale_max'[{}] = {}; scales must be finite and >= 0",
                   file_of(p + ".q_scale_max"), p, g, v);
      l.scale_max256.push_back(quant::exl2_scale_max256(qmax16[g]));
    }
    // q_invperm: the packed row of each input, a permutation of 0..in-1 (q_perm, when stored, its inverse).
    const auto* inv = reinterpret_cast<const int32_t*>(tensor(p + ".q_invperm", "I32", {in}, what).data);
    const std::string inv_file = file_of(p + ".q_invperm");
    l.invperm.assign(inv, inv + in);
    std::vector<int32_t> perm(static_cast<size_t>(in), -1);
    for (int64_t k = 0; k < in; ++k) {
      CYPRIS_CHECK(inv[k] >= 0 && inv[k] < in && perm[static_cast<size_t>(inv[k])] < 0,
                   "{}: tensor '{}.q_invperm'[{}] = {}: not a permutation of 0..{}", inv_file, p, k, inv[k], in - 1);
      perm[static_cast<size_t>(inv[k])] = static_cast<int32_t>(k);
    }
    if (ckpt_.find(p + ".q_perm") != nullptr) {
      const auto* qp = reinterpret_cast<const int32_t*>(tensor(p + ".q_perm", "I32", {in}, what).data);
      for (int64_t k = 0; k < in; ++k) {
        CYPRIS_CHECK(qp[k] == perm[static_cast<size_t>(k)],
                     "{}: tensor '{}.q_perm'[{}] = {} but q_invperm puts input {} there; q_perm must be the inverse of "
                     "q_invperm",
                     file_of(p + ".q_perm"), p, k, qp[k], perm[static_cast<size_t>(k)]);
      }
    }
    l.group_of_row.resize(static_cast<size_t>(in));
    for (size_t g = 0; g < l.groups.size(); ++g) {
      for (int64_t r = 0; r < l.groups[g].rows; ++r) {
        l.group_of_row[static_cast<size_t>(l.groups[g].row0 + r)] = static_cast<int32_t>(g);
      }
    }
    return l;
  }

  std::filesystem::path dir_;
  QuantConfig q_;
  std::unique_ptr<WeightSource> plain_;
  SafetensorsCheckpoint ckpt_;
  mutable std::mutex mu_;
  mutable std::map<std::string, quant::Exl2Layer> layers_;
};

}  // namespace

std::optional<QuantConfig> exl2_config_from_tensors(const std::filesystem::path& dir,
                                                    const std::vector<std::string>& ignore_patterns) {
  if (!SafetensorsCheckpoint::present(dir)) return std::nullopt;
  std::vector<std::string> names;
  try {
    names = SafetensorsCheckpoint(dir, ignore_patterns).names();
  } catch (const Error&) {
    return std::nullopt;  // the plain source reports what is wrong with the files, as for any checkpoint
  }
  for (const std::string& name : names) {
    if (!ends_with(name, ".q_invperm")) continue;
    QuantConfig q;
    q.method = "exl2";
    q.group_size = -1;
    q.zero_point_plus_one = false;
    q.checkpoint_format = "exl2";
    q.source = fmt::format("{} (tensor '{}'; config.json has no quantization_config)", dir.string(), name);
    return q;
  }
  return std::nullopt;
}

std::unique_ptr<WeightSource> make_exl2_weight_source(const std::filesystem::path& dir, const QuantConfig& q,
                                                      std::unique_ptr<WeightSource> plain) {
  return std::make_unique<Exl2WeightSource>(dir, q, std::move(plain));
}

}  // namespace cypris
