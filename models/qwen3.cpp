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

namespace cypris {
namespace {

// Qwen's sliding window (Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE): only when use_sliding_window, and from
// max_window_layers on (as transformers does).
void qwen_sliding_layers(const ConfigFields& f, ModelConfig& c, int window) {
  const bool use = f.get_bool("use_sliding_window", false);
  const int max_window_layers = static_cast<int>(f.get_int("max_window_layers", c.num_hidden_layers));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    if (use && i >= max_window_layers) c.layer_sliding_window[i] = window;
  }
}

// Qwen2 always has q/k/v biases and none on o_proj (attention_bias is not read).
void read_qwen2_config(const ConfigFields&, ModelConfig& c) {
  c.qkv_bias = true;
  c.o_bias = false;
}

}  // namespace

const ModelFamily& qwen2_family() {
  static const ModelFamily f = [] {
    ModelFamily m;
    m.name = "qwen2";
    m.sliding_layers = qwen_sliding_layers;
    m.read_config = read_qwen2_config;
    // Qwen2-MoE: Qwen2 attention, routed experts not renormalised, a shared expert (ffn_*_shexp)
    // gated by ffn_gate_inp_shexp.
    GgufArchitecture moe{"qwen2moe", "Qwen2MoeForCausalLM", "qwen2_moe", /*qkv_bias=*/true, false, false,
                         R"({"norm_topk_prob": false})"};
    moe.experts = GgufExperts::Required;
    m.gguf = {GgufArchitecture{"qwen2", "Qwen2ForCausalLM", "qwen2", /*qkv_bias=*/true}, moe};
    return m;
  }();
  return f;
}

// Qwen3 (dense and MoE) shares Qwen2's sliding-window fields but has attention_bias like Llama.
const ModelFamily& qwen3_family() {
  static const ModelFamily f = [] {
    ModelFamily m;
    m.name = "qwen3";
    m.sliding_layers = qwen_sliding_layers;
    // GGUF Qwen3: no biases, per-head q/k RMSNorm (attn_q_norm / attn_k_norm), head_dim from
    // attention.key_length (128 where hidden / heads is not). Qwen3-MoE: every layer routed
    // (softmax, top-k renormalised), experts merged per layer.
    GgufArchitecture moe{"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", false, false, false,
                         R"({"norm_topk_prob": true})"};
    moe.experts = GgufExperts::Required;
    m.gguf = {GgufArchitecture{"qwen3", "Qwen3ForCausalLM", "qwen3"}, moe};
    return m;
  }();
  return f;
}

}  // namespace cypris
