#include "models/llama.h"

#include <algorithm>

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
    embed_ = VocabParallelEmbedding(w, "model.embed_tokens.weight");
    layers_.resize(cfg.num_hidden_layers);
    for (int i = 0; i < cfg.num_hidden_layers; ++i) {
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
    final_norm_ = RmsNorm(w, "model.norm.weight", h, eps);
    lm_head_ = LmHead(w, cfg.tie_word_embeddings ? &embed_ : nullptr);
    rope_ = RotaryCache(backend, cfg);
  }

  bool graph_capturable() const override {
    return std::none_of(layers_.begin(), layers_.end(), [](const LlamaLayer& L) { return L.is_moe; });
  }

  DeviceTensor forward(const ForwardInputs& in, std::vector<KvCacheLayer>& kv) override {
    check_cache(kv);
    bind_lora(in);
    const int64_t t = in.token_ids.shape[0];
    const int64_t h = cfg_.hidden_size;
    ForwardScratch scratch(backend_, t);
    DeviceTensor residual = backend_.empty(backend_.activation_dtype(), {t, h});  // [T, hidden]
    DeviceTensor hidden = backend_.empty(backend_.activation_dtype(), {t, h});    // [T, hidden]

    embed_.forward(backend_, in.token_ids, residual.view);
    dump("embed", residual.view);
    for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
      const LlamaLayer& L = layers_[i];
      const Dumper d = dumper("layers." + std::to_string(i) + ".");
      if (i == 0) {
        L.input_norm.forward(backend_, residual.view, hidden.view);
      } else {
        L.input_norm.add_forward(backend_, hidden.view, residual.view);
      }
      d("input_norm", hidden.view);
      L.attn.forward(backend_, hidden.view, in, kv[i], rope_, scratch, hidden.view, d);
      L.post_norm.add_forward(backend_, hidden.view, residual.view);
      d("residual_mid", residual.view);
      d("post_norm", hidden.view);
      if (L.is_moe) {
        hidden = L.moe.forward(backend_, hidden.view, d);
        d("mlp_out", hidden.view);
      } else {
        L.mlp.forward(backend_, hidden.view, scratch, hidden.view, d);
      }
    }
    final_norm_.add_forward(backend_, hidden.view, residual.view);
    dump("final_norm", hidden.view);
    DeviceTensor logits = lm_head_.forward_selected(backend_, hidden.view, in.logits_indices);
    dump("logits", logits.view);
    return logits;
  }

 private:
  VocabParallelEmbedding embed_;
  std::vector<LlamaLayer> layers_;
  RmsNorm final_norm_;
  LmHead lm_head_;
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
