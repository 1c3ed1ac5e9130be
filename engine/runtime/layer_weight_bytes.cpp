#include "engine/runtime/layer_weight_bytes.h"

#include <initializer_list>
#include <string>

namespace cypris {
namespace {

// Bytes of a [rows, cols] linear weight named `name` in layer `prefix`: at the checkpoint's
// block-quantized type when it has one (tried with and without the "model." prefix), else dtype.
// `names` are the spellings of one weight across families (Mixtral's experts are w1/w2/w3, Phi-3's
// q/k/v and gate/up fused).
int64_t linear_bytes(const WeightSource& w, const std::string& prefix, std::initializer_list<const char*> names,
                     int64_t rows, int64_t cols, DType dtype) {
  for (const char* name : names) {
    for (const std::string& full : {"model." + prefix + name, prefix + name}) {
      if (std::optional<DType> native = w.native_dtype(full); native && dtype_is_quantized(*native)) {
        const DTypeBlock b = dtype_block(*native);
        if (cols % b.elems == 0) return rows * (cols / b.elems) * b.bytes;
      }
    }
  }
  return rows * cols * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace

std::vector<int64_t> estimate_layer_weight_bytes(const ModelConfig& cfg, const WeightSource& weights,
                                                 DType weight_dtype, int tp, int first_layer, int end_layer) {
  const int64_t t = tp > 0 ? tp : 1;
  const int64_t h = cfg.hidden_size;
  const int64_t hd = cfg.head_dim;
  const int64_t q = int64_t{cfg.num_attention_heads} * hd;
  const int64_t kv = int64_t{cfg.num_key_value_heads} * hd;
  std::vector<int64_t> out;
  for (int i = first_layer; i < end_layer; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    int64_t b = 0;
    b += linear_bytes(weights, p, {"self_attn.q_proj.weight", "self_attn.qkv_proj.weight"}, q, h, weight_dtype);
    b += linear_bytes(weights, p, {"self_attn.k_proj.weight", "self_attn.qkv_proj.weight"}, kv, h, weight_dtype);
    b += linear_bytes(weights, p, {"self_attn.v_proj.weight", "self_attn.qkv_proj.weight"}, kv, h, weight_dtype);
    b += linear_bytes(weights, p, {"self_attn.o_proj.weight"}, h, q, weight_dtype);
    const bool moe = cfg.num_experts > 0 &&
                     (cfg.layer_is_moe.empty() || (static_cast<size_t>(i) < cfg.layer_is_moe.size() &&
                                                   cfg.layer_is_moe[static_cast<size_t>(i)]));
    if (moe) {
      const int64_t inter = cfg.moe_intermediate_size > 0 ? cfg.moe_intermediate_size : cfg.intermediate_size;
      const int64_t gate_up = linear_bytes(
          weights, p, {"mlp.experts.0.gate_proj.weight", "block_sparse_moe.experts.0.w1.weight"}, inter, h, weight_dtype);
      const int64_t down = linear_bytes(
          weights, p, {"mlp.experts.0.down_proj.weight", "block_sparse_moe.experts.0.w2.weight"}, h, inter, weight_dtype);
      const int64_t per_expert = 2 * gate_up + down;
      b += per_expert * cfg.num_experts;
      b += int64_t{cfg.num_experts} * h * 4;  // the router (fp32 at most)
      if (cfg.shared_expert_intermediate_size > 0) {  // its three projections and its [1, hidden] gate
        b += (3 * cfg.shared_expert_intermediate_size + 1) * h * static_cast<int64_t>(dtype_size(weight_dtype));
      }
    } else {
      const int64_t inter = cfg.intermediate_size;
      b += linear_bytes(weights, p, {"mlp.gate_proj.weight", "mlp.gate_up_proj.weight"}, inter, h, weight_dtype) +
           linear_bytes(weights, p, {"mlp.up_proj.weight", "mlp.gate_up_proj.weight"}, inter, h, weight_dtype) +
           linear_bytes(weights, p, {"mlp.down_proj.weight"}, h, inter, weight_dtype);
    }
    int64_t f32 = 4 * h + 2 * hd;  // the norms (up to four per layer: Gemma 2 / 3) and q/k norms (Qwen3, Gemma 3)
    if (cfg.use_qk_norm) f32 += q + kv;  // Command R+: one q/k LayerNorm row per head
    if (cfg.qkv_bias) f32 += q + 2 * kv;
    if (cfg.o_bias) f32 += h;
    if (cfg.mlp_bias) f32 += 2 * cfg.intermediate_size + h;
    b = b / t + f32 * 4;
    out.push_back(b);
  }
  return out;
}

}  // namespace cypris
