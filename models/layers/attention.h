// The attention block of a decoder layer over the paged KV cache: merged q/k/v projection
// (column-parallel: this rank's heads), optional per-head q/k RMSNorm, rotary, cache write, paged
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
  // Per-head RMSNorm of q and k before rotary (Qwen3, Gemma 3): weight names under prefix.
  std::string q_norm, k_norm;
  float qk_norm_eps = 1e-6f;
  float qk_norm_offset = 0.0f;  // Gemma's (1 + w)
  // Instead: a LayerNorm without bias per head with one weight row per head ([heads, head_dim]
  // tensors under the same names; Command R+).
  bool qk_layer_norm = false;
  float scale = 0.0f;           // softmax scale; 0: 1 / sqrt(head_dim)
  float softcap = 0.0f;         // > 0: attention scores soft-capped (Gemma 2)
  bool rope = true;             // false: no positional rotation (Cohere 2's global layers)
  // The checkpoint's rotary pairs dims (2i, 2i+1) (GPT-J style, Cohere): q and k rows are
  // reordered within each head at load to [even dims | odd dims], which the Neox rotary then
  // rotates the same way (q·k is unchanged by reordering both alike).
  bool interleaved_rope = false;
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
  RmsNorm q_norm_, k_norm_;
  bool qk_norm_ = false;
  DeviceTensor q_ln_, k_ln_;  // F32 [local heads, head_dim] when qk_layer_norm
  float qk_ln_eps_ = 0.0f;
  float scale_ = 1.0f;
  float softcap_ = 0.0f;
  bool rope_ = true;
  int sliding_window_ = 0;
};

}  // namespace cypris
