#include "models/qwen3.h"

#include "engine/common/error.h"
#include "models/llama.h"

namespace cypris {

std::unique_ptr<Model> create_qwen3_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                          const ModelBuildOptions& options) {
  // transformers' Qwen3Attention: q_norm / k_norm (RMSNorm over head_dim, eps = rms_norm_eps) on
  // the projected heads, then rotary; the rest of the layer is Llama's.
  LlamaVariant v;
  v.qk_norm = true;
  return create_llama_style_model(cfg, weights, backend, options, v);
}

std::unique_ptr<Model> create_qwen3_moe_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                              const ModelBuildOptions& options) {
  CYPRIS_CHECK(cfg.num_experts > 0, "{}: Qwen3MoeForCausalLM needs num_experts", cfg.source);
  // transformers' Qwen3MoeSparseMoeBlock: mlp.gate is the router, mlp.experts.<e>.{gate,up,down}_proj.
  LlamaVariant v;
  v.qk_norm = true;
  return create_llama_style_model(cfg, weights, backend, options, v);
}

std::unique_ptr<Model> create_qwen2_moe_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                              const ModelBuildOptions& options) {
  CYPRIS_CHECK(cfg.num_experts > 0, "{}: Qwen2MoeForCausalLM needs num_experts", cfg.source);
  // transformers' Qwen2MoeSparseMoeBlock: Qwen3-MoE's routed experts (q/k/v biases, no q/k norm)
  // plus mlp.shared_expert gated by sigmoid(mlp.shared_expert_gate · x).
  return create_llama_style_model(cfg, weights, backend, options, LlamaVariant{});
}

}  // namespace cypris
