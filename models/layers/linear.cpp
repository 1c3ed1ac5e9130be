#include "models/layers/linear.h"

#include <cstring>
#include <vector>

#include "engine/common/error.h"
#include "engine/backend/communicator.h"
#include "models/layers/lora.h"
#include "models/layers/segmented_linear.h"

namespace cypris {

void tp_all_reduce(const ModelBuildOptions& opt, Tensor& t) {
  if (opt.parallel.world_size > 1) opt.comm->all_reduce(t.data, t.dtype, t.numel());
}

std::string bias_name(const std::string& weight_name) {
  const std::string suffix = ".weight";
  CYPRIS_CHECK(weight_name.ends_with(suffix), "bias_name: '{}' does not end in .weight", weight_name);
  return weight_name.substr(0, weight_name.size() - suffix.size()) + ".bias";
}

ColumnParallelLinear::ColumnParallelLinear(const WeightLoader& w, const std::vector<LinearPart>& parts,
                                           int64_t in_features, bool with_bias) {
  std::vector<std::vector<LinearSegment>> segmented;
  bool any_segmented = false;
  for (const LinearPart& p : parts) {
    segmented.push_back(w.load_linear_segments(p, in_features));
    any_segmented = any_segmented || !segmented.back().empty();
  }
  if (any_segmented) {
    // Each part its own product: the segmented ones over their reordered columns, the others whole.
    for (size_t i = 0; i < parts.size(); ++i) {
      column0_.push_back(out_features_);
      if (segmented[i].empty()) {
        weights_.push_back(w.load_linear({parts[i]}, in_features));
        out_features_ += weights_.back().view.shape[0];
      } else {
        weights_.emplace_back();
        out_features_ += segmented[i].front().weight.view.shape[0];
      }
      segments_.push_back(std::move(segmented[i]));
    }
  } else {
    for (const std::vector<LinearPart>& run : w.same_dtype_runs(parts, in_features)) {
      weights_.push_back(w.load_linear(run, in_features));
      column0_.push_back(out_features_);
      out_features_ += weights_.back().view.shape[0];
    }
  }
  if (with_bias) {
    std::vector<LinearPart> bias_parts = parts;
    for (LinearPart& p : bias_parts) p.name = bias_name(p.name);
    bias_ = w.load_stacked_bias(bias_parts);
  }
  register_lora(w, parts, in_features, 0, 0);
}

void ColumnParallelLinear::register_lora(const WeightLoader& w, const std::vector<LinearPart>& parts,
                                         int64_t in_features, int64_t neox_rows, int head_dim) {
  lora_ = w.options().lora;
  if (!lora_) return;
  const std::string suffix = ".weight";
  int64_t column0 = 0;
  for (const LinearPart& p : parts) {
    const int64_t row0 = p.row0 >= 0 ? p.row0 : 0;
    const int64_t rows = p.row0 >= 0 ? p.row_count : p.full_rows;
    const int64_t local = p.shard.dim < 0 || p.shard.world_size <= 1 ? rows : rows / p.shard.world_size;
    if (p.name.ends_with(suffix)) {
      const std::string module = p.name.substr(0, p.name.size() - suffix.size());
      const int neox = column0 < neox_rows ? head_dim : 0;
      const int site = lora_->add_column(module, in_features, p.full_rows, row0, rows, p.shard, column0, neox);
      if (site >= 0) lora_sites_.push_back(site);
    }
    column0 += local;
  }
}

void deinterleave_rows(HostTensor& t, int64_t rows, int head_dim) {
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  const size_t row_bytes = dtype_nbytes(t.dtype, cols);
  std::vector<char> head(row_bytes * static_cast<size_t>(head_dim));
  char* base = static_cast<char*>(t.buffer.data());
  const int half = head_dim / 2;
  for (int64_t h0 = 0; h0 < rows; h0 += head_dim) {
    char* src = base + row_bytes * static_cast<size_t>(h0);
    std::memcpy(head.data(), src, head.size());
    for (int i = 0; i < head_dim; ++i) {
      const int old = i < half ? 2 * i : 2 * (i - half) + 1;
      std::memcpy(src + row_bytes * i, head.data() + row_bytes * old, row_bytes);
    }
  }
}


ColumnParallelLinear ColumnParallelLinear::interleaved_to_neox(const WeightLoader& w,
                                                               const std::vector<LinearPart>& parts,
                                                               int64_t in_features, bool with_bias, int64_t rows,
                                                               int head_dim) {
  ColumnParallelLinear l;
  HostTensor weight = w.load_linear_host(parts, in_features);
  deinterleave_rows(weight, rows, head_dim);
  l.out_features_ = weight.shape[0];
  l.weights_.push_back(w.backend().upload_weight(std::move(weight)));
  l.column0_.push_back(0);
  if (with_bias) {
    std::vector<LinearPart> bias_parts = parts;
    for (LinearPart& p : bias_parts) p.name = bias_name(p.name);
    DeviceTensor b = w.load_stacked_bias(bias_parts);
    HostTensor hb;
    hb.dtype = DType::F32;
    hb.shape = {b.view.shape[0]};
    hb.buffer = Buffer(b.view.nbytes());
    w.backend().download(b.view, hb.buffer.data());
    deinterleave_rows(hb, rows, head_dim);
    l.bias_ = w.backend().upload_weight(std::move(hb));
  }
  l.register_lora(w, parts, in_features, rows, head_dim);
  return l;
}

void ColumnParallelLinear::forward(Backend& b, const Tensor& x, Tensor& out) const {
  const Tensor* bias = bias_.view.data ? &bias_.view : nullptr;
  if (weights_.size() == 1 && segments_.empty()) {
    b.linear(x, weights_[0].view, bias, out);
  } else {
    forward_parts(b, x, bias, out);
  }
  for (int site : lora_sites_) lora_->apply(b, site, x, out);
}

void ColumnParallelLinear::forward_parts(Backend& b, const Tensor& x, const Tensor* bias, Tensor& out) const {
  for (size_t i = 0; i < weights_.size(); ++i) {
    const bool segmented = !segments_.empty() && !segments_[i].empty();
    const int64_t n = segmented ? segments_[i].front().weight.view.shape[0] : weights_[i].view.shape[0];
    Tensor part = column_slice(out, column0_[i], n);
    Tensor part_bias;
    if (bias) {
      part_bias = *bias;
      part_bias.data = static_cast<char*>(bias->data) + column0_[i] * dtype_size(bias->dtype);
      part_bias.shape = {n};
    }
    if (segmented) {
      segmented_linear(b, segments_[i], x, bias ? &part_bias : nullptr, part);
    } else {
      b.linear(x, weights_[i].view, bias ? &part_bias : nullptr, part);
    }
  }
}

RowParallelLinear::RowParallelLinear(const WeightLoader& w, const std::string& name, int64_t out_features,
                                     int64_t in_features, bool with_bias)
    : opt_(&w.options()) {
  const auto& par = w.options().parallel;
  const LinearPart part{name, out_features, ShardSpec::split(1, par.rank, par.world_size)};
  segments_ = w.load_linear_segments(part, in_features);
  if (segments_.empty()) weight_ = w.load_linear({part}, in_features);
  if (with_bias && par.rank == 0) bias_ = w.load_f32(bias_name(name), {out_features});
  lora_ = w.options().lora;
  const std::string suffix = ".weight";
  if (lora_ && name.ends_with(suffix)) {
    lora_site_ = lora_->add_row(name.substr(0, name.size() - suffix.size()), out_features, in_features,
                                ShardSpec::split(1, par.rank, par.world_size));
  }
}

void RowParallelLinear::forward(Backend& b, const Tensor& x, Tensor& out, bool reduce) const {
  const Tensor* bias = bias_.view.data ? &bias_.view : nullptr;
  if (segments_.empty()) {
    b.linear(x, weight_.view, bias, out);
  } else {
    segmented_linear(b, segments_, x, bias, out);
  }
  if (lora_site_ >= 0) lora_->apply(b, lora_site_, x, out);
  if (reduce) tp_all_reduce(*opt_, out);
}

}  // namespace cypris
