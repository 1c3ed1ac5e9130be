// The attention block of a decoder layer over the paged KV cache: merged q/k/v projection
// (column-parallel: this rank's heads), rotary, cache write, paged
// attention, and the row-parallel output projection.
#pragma once

#include <string>

#include "models/layers/common.h"
#include "models/layers/linear.h"
#include "models/model.h"

namespace cypris {

struct AttentionSpec {
  std::string prefix;  // "model.layers.3.self_attn."
  // Checkpoint names under prefix: q/k/v stacked from three tensors, or one fused tensor whose
  // rows are [q | k | v] (Phi-3's qkv_proj).
  std::string q = "q_proj.weight", k = "k_proj.weight", v = "v_proj.weight";
  std::string fused_qkv;  // e.g. "qkv_proj.weight"; empty: separate q/k/v
  std::string o = "o_proj.weight";
  bool qkv_bias = false;
  bool o_bias = false;
  float scale = 0.0f;  // softmax scale; 0: 1 / sqrt(head_dim)
  int sliding_window = 0;
};

class AttentionBlock {
 public:
  AttentionBlock() = default;
  AttentionBlock(const WeightLoader& w, const TpLayout& layout, const AttentionSpec& spec);
  // out [T, hidden] = o_proj(attention(x)), all-reduced unless reduce is false. x and out may alias.
  void forward(Backend& b, const Tensor& x, const ForwardInputs& in, KvCacheLayer& kv, const RotaryCache& rope,
               ForwardScratch& scratch, Tensor& out, const Dumper& dump, bool reduce = true) const;

 private:
  TpLayout layout_;
  ColumnParallelLinear qkv_;  // [(Hq + 2 Hkv) * D on this rank, hidden]
  RowParallelLinear o_;       // [hidden, Hq * D / tp]
  float scale_ = 1.0f;
  int sliding_window_ = 0;
};

}  // namespace cypris
