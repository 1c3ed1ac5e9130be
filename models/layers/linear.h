// Tensor-parallel linear layers (vLLM's ColumnParallelLinear / MergedColumnParallelLinear /
// QKVParallelLinear and RowParallelLinear) over Backend::linear. A column-parallel layer keeps
// this rank's output rows (several checkpoint tensors may be stacked into one weight: q/k/v,
// gate/up); a row-parallel layer keeps this rank's input columns and all-reduces its output.
#pragma once

#include <vector>

#include "models/layers/weight_loader.h"

namespace cypris {

class LoraSites;

// Sums a tensor over the ranks in place (no-op at tp 1).
void tp_all_reduce(const ModelBuildOptions& opt, Tensor& t);

class ColumnParallelLinear {
 public:
  ColumnParallelLinear() = default;
  // parts: the stacked tensors with their row shards; with_bias loads "<name minus .weight>.bias"
  // of each part.
  ColumnParallelLinear(const WeightLoader& w, const std::vector<LinearPart>& parts, int64_t in_features,
                       bool with_bias);
  // The first `rows` output rows (q and k) reordered within each head_dim group from interleaved
  // pairs to [even | odd] halves (see AttentionSpec::interleaved_rope).
  static ColumnParallelLinear interleaved_to_neox(const WeightLoader& w, const std::vector<LinearPart>& parts,
                                                  int64_t in_features, bool with_bias, int64_t rows, int head_dim);
  // out [T, out_features()] = x [T, in] · Wᵀ (+ b); out may be a column slice.
  void forward(Backend& b, const Tensor& x, Tensor& out) const;
  int64_t out_features() const { return out_features_; }
  // The one weight when the layer is a single product without bias (what a grouped product of
  // several layers takes, Backend::grouped_linear); null otherwise.
  const Tensor* sole_weight() const {
    return weights_.size() == 1 && segments_.empty() && !bias_.view.data ? &weights_[0].view : nullptr;
  }

 private:
  // With --enable-lora: one LoRA site per part (models/layers/lora.h), each adding to the part's
  // output columns; neox_head_dim > 0 when the rows were reordered (interleaved_to_neox).
  void register_lora(const WeightLoader& w, const std::vector<LinearPart>& parts, int64_t in_features,
                     int64_t neox_rows, int head_dim);
  void forward_parts(Backend& b, const Tensor& x, const Tensor* bias, Tensor& out) const;

  // Usually one weight; several when the stacked parts keep different quantized types
  // (WeightLoader::same_dtype_runs): each then fills its own columns of out.
  std::vector<DeviceTensor> weights_;
  // Empty, or one entry per weight: a part kept quantized over reordered input columns (act-order
  // GPTQ, EXL2) has its segments here and no weight in weights_ (WeightLoader::load_linear_segments).
  std::vector<std::vector<LinearSegment>> segments_;
  std::vector<int64_t> column0_;  // first output column of each weight
  int64_t out_features_ = 0;
  DeviceTensor bias_;
  LoraSites* lora_ = nullptr;
  std::vector<int> lora_sites_;
};

class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  // name: the [out_features, in_features] tensor, split on its input dimension.
  RowParallelLinear(const WeightLoader& w, const std::string& name, int64_t out_features, int64_t in_features,
                    bool with_bias);
  // out [T, out] = x [T, in / tp] · Wᵀ summed over the ranks, + b once. With reduce false the
  // caller sums (several row-parallel outputs added before one all-reduce).
  void forward(Backend& b, const Tensor& x, Tensor& out, bool reduce = true) const;
  // The weight when there is no bias (as ColumnParallelLinear::sole_weight); null otherwise.
  const Tensor* sole_weight() const { return bias_.view.data || !segments_.empty() ? nullptr : &weight_.view; }

 private:
  DeviceTensor weight_;
  std::vector<LinearSegment> segments_;  // kept over reordered input columns (then no weight_)
  DeviceTensor bias_;  // only on rank 0: the all-reduce adds it once
  const ModelBuildOptions* opt_ = nullptr;
  LoraSites* lora_ = nullptr;  // --enable-lora: the update is added before the all-reduce
  int lora_site_ = -1;
};

// Rows [0, rows) of t (rows of a 2-D tensor, elements of a 1-D one) regrouped per head of head_dim
// rows, from interleaved rotary pairs to [even | odd] halves: new row h*D + i takes old row h*D + 2i
// (i < D/2) or h*D + 2(i - D/2) + 1.
void deinterleave_rows(HostTensor& t, int64_t rows, int head_dim);

// The bias name of a weight name: "x.weight" -> "x.bias".
std::string bias_name(const std::string& weight_name);

}  // namespace cypris
