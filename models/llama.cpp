#include "models/llama.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "models/layers/attention.h"
#include "models/layers/common.h"
#include "models/layers/decoder_model.h"
#include "models/layers/mlp.h"
#include "models/layers/moe.h"
#include "models/layers/vocab_parallel.h"

namespace cypris {
namespace {

struct LlamaLayer {
  RmsNorm input_norm;
  AttentionBlock attn;
  RmsNorm post_norm;
  GatedMlp mlp;
  SparseMoe moe;  // instead of mlp when is_moe
  bool is_moe = false;
};

class LlamaModel : public DecoderModel {
 public:
  LlamaModel(const ModelConfig& cfg, const WeightSource& weights, Backend& backend, const ModelBuildOptions& opt,
             const LlamaVariant& variant)
      : DecoderModel(cfg, backend, opt) {
    CYPRIS_CHECK(cfg.hidden_act == "silu", "{}: {} uses a SiLU MLP, but hidden_act is {}", cfg.source,
                 cfg.architectures.front(), cfg.hidden_act);
    const WeightLoader w(cfg_, weights, backend, opt_);
    const int64_t h = cfg.hidden_size;
    const float eps = static_cast<float>(cfg.rms_norm_eps);
    load_embedding(w, "model.embed_tokens.weight");
    layers_.resize(cfg.num_hidden_layers);
    for (int i = first_layer(); i < end_layer(); ++i) {
      weights_of_layer(i);
      const std::string p = "model.layers." + std::to_string(i) + ".";
      LlamaLayer& L = layers_[i];
      L.input_norm = RmsNorm(w, p + "input_layernorm.weight", h, eps);
      L.post_norm = RmsNorm(w, p + "post_attention_layernorm.weight", h, eps);
      AttentionSpec a;
      a.prefix = p + "self_attn.";
      a.qkv_bias = cfg.qkv_bias;
      a.o_bias = cfg.o_bias;
      a.sliding_window = cfg.layer_sliding_window[i];
      a.fused_qkv = variant.fused_qkv;
      if (variant.qk_norm) {
        a.q_norm = "q_norm.weight";
        a.k_norm = "k_norm.weight";
        a.qk_norm_eps = eps;
      }
      L.attn = AttentionBlock(w, layout_, a);
      L.is_moe = !cfg.layer_is_moe.empty() && cfg.layer_is_moe[i];
      if (L.is_moe) {
        MoeSpec m;
        m.prefix = p + variant.moe_block;
        m.gate = variant.moe_gate;
        m.up = variant.moe_up;
        m.down = variant.moe_down;
        m.num_experts = cfg.num_experts;
        m.top_k = cfg.num_experts_per_tok;
        m.renormalize = cfg.norm_topk_prob;
        m.intermediate_size = cfg.moe_intermediate_size;
        m.shared_intermediate_size = cfg.shared_expert_intermediate_size;
        L.moe = SparseMoe(w, layout_, m);
      } else {
        MlpSpec m;
        m.prefix = p + "mlp.";
        m.intermediate_size = cfg.intermediate_size;
        m.bias = cfg.mlp_bias;
        m.fused_gate_up = variant.fused_gate_up;
        L.mlp = GatedMlp(w, layout_, m);
      }
    }
    weights_of_layer(-1);
    if (last_stage()) final_norm_ = RmsNorm(w, "model.norm.weight", h, eps);
    load_lm_head(w, cfg.tie_word_embeddings);
    rope_ = RotaryCache(backend, cfg);
  }

  bool graph_capturable() const override {
    return std::none_of(layers_.begin(), layers_.end(), [](const LlamaLayer& L) { return L.is_moe; });
  }

  void layer_forward(int i, LayerStream& s, const ForwardInputs& in, KvCacheLayer& kv, ForwardScratch& scratch,
                     const Dumper& d) override {
    const LlamaLayer& L = layers_[i];
    Tensor& residual = s.residual.view;
    if (i == 0) {
      L.input_norm.forward(backend_, residual, s.hidden.view);
    } else {
      L.input_norm.add_forward(backend_, s.hidden.view, residual);
    }
    d("input_norm", s.hidden.view);
    L.attn.forward(backend_, s.hidden.view, in, kv, rope_, scratch, s.hidden.view, d);
    L.post_norm.add_forward(backend_, s.hidden.view, residual);
    d("residual_mid", residual);
    d("post_norm", s.hidden.view);
    if (L.is_moe) {
      s.hidden = L.moe.forward(backend_, s.hidden.view, d);
      d("mlp_out", s.hidden.view);
    } else {
      L.mlp.forward(backend_, s.hidden.view, scratch, s.hidden.view, d);
    }
  }

  void final_norm(LayerStream& s, ForwardScratch&) override {
    final_norm_.add_forward(backend_, s.hidden.view, s.residual.view);
  }

 private:
  std::vector<LlamaLayer> layers_;
  RmsNorm final_norm_;
  RotaryCache rope_;
};

}  // namespace

std::unique_ptr<Model> create_llama_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                          const ModelBuildOptions& options) {
  return std::make_unique<LlamaModel>(cfg, weights, backend, options, LlamaVariant{});
}

std::unique_ptr<Model> create_llama_style_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                                const ModelBuildOptions& options, const LlamaVariant& variant) {
  return std::make_unique<LlamaModel>(cfg, weights, backend, options, variant);
}

}  // namespace cypris

// Llama and Mistral read config.json with the shared fields only (Mistral's sliding window covers
// every layer). GGUF: llama.cpp writes Llama, Mistral and Mixtral as "llama", with its rotary row
// order on q/k; a file with experts is a Mixtral.
namespace cypris {
namespace {

void llama_gguf_adjust(const GgufModel&, nlohmann::json& j) {
  if (!j.contains("num_experts")) return;
  j["architectures"] = {"MixtralForCausalLM"};
  j["model_type"] = "mixtral";
  j["num_local_experts"] = j["num_experts"];
  j.erase("num_experts");
}

}  // namespace

const ModelFamily& llama_family() {
  static const ModelFamily f = [] {
    ModelFamily m;
    m.name = "llama";
    GgufArchitecture g{"llama", "LlamaForCausalLM", "llama", /*qkv_bias=*/false, /*permuted_qk=*/true};
    g.experts = GgufExperts::Optional;
    g.adjust = llama_gguf_adjust;
    m.gguf = {g};
    return m;
  }();
  return f;
}

}  // namespace cypris
