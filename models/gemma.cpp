#include "models/gemma.h"

#include <cmath>

#include "engine/common/error.h"
#include "models/layers/attention.h"
#include "models/layers/common.h"
#include "models/layers/decoder_model.h"
#include "models/layers/mlp.h"
#include "models/layers/vocab_parallel.h"

namespace cypris {
namespace {

struct GemmaLayer {
  RmsNorm input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;
  AttentionBlock attn;
  GatedMlp mlp;
  bool sliding = false;
};

// Where the language model's tensors live: "model." in the text checkpoints,
// "language_model.model." (or "model.language_model.") in the multimodal ones.
std::string text_prefix(const WeightLoader& w) {
  for (const char* p : {"model.", "language_model.model.", "model.language_model."}) {
    if (w.contains(std::string(p) + "embed_tokens.weight")) return p;
  }
  return "model.";  // resolve() then names the missing tensor
}

class GemmaModel : public DecoderModel {
 public:
  GemmaModel(const ModelConfig& cfg, const WeightSource& weights, Backend& backend, const ModelBuildOptions& opt)
      : DecoderModel(cfg, backend, opt) {
    const std::string& arch = cfg.architectures.front();
    gemma3_ = arch.rfind("Gemma3", 0) == 0;
    CYPRIS_CHECK(cfg.hidden_act == "gelu_tanh", "{}: {} uses a gelu-tanh MLP, but hidden_activation is {}", cfg.source,
                 arch, cfg.hidden_act);
    CYPRIS_CHECK(cfg.tie_word_embeddings,
                 "{}: {} ties the LM head to the embedding; tie_word_embeddings false is not "
                 "supported",
                 cfg.source, arch);
    const WeightLoader w(cfg_, weights, backend, opt_);
    const std::string p0 = text_prefix(w);
    const int64_t h = cfg.hidden_size;
    const float eps = static_cast<float>(cfg.rms_norm_eps);
    const float scale = static_cast<float>(1.0 / std::sqrt(cfg.query_pre_attn_scalar.value_or(256.0)));
    embed_ = VocabParallelEmbedding(w, p0 + "embed_tokens.weight");
    layers_.resize(cfg.num_hidden_layers);
    for (int i = 0; i < cfg.num_hidden_layers; ++i) {
      const std::string p = p0 + "layers." + std::to_string(i) + ".";
      GemmaLayer& L = layers_[i];
      // Gemma's RMSNorm multiplies by (1 + w): the 1 is added once here.
      L.input_norm = RmsNorm(w, p + "input_layernorm.weight", h, eps, 1.0f);
      L.post_attn_norm = RmsNorm(w, p + "post_attention_layernorm.weight", h, eps, 1.0f);
      L.pre_ff_norm = RmsNorm(w, p + "pre_feedforward_layernorm.weight", h, eps, 1.0f);
      L.post_ff_norm = RmsNorm(w, p + "post_feedforward_layernorm.weight", h, eps, 1.0f);
      L.sliding = cfg.layer_sliding_window[i] > 0;
      AttentionSpec a;
      a.prefix = p + "self_attn.";
      a.qkv_bias = a.o_bias = cfg.qkv_bias;
      a.scale = scale;
      a.softcap = static_cast<float>(cfg.attn_logit_softcapping);
      a.sliding_window = cfg.layer_sliding_window[i];
      if (gemma3_) {
        a.q_norm = "q_norm.weight";
        a.k_norm = "k_norm.weight";
        a.qk_norm_eps = eps;
        a.qk_norm_offset = 1.0f;
      }
      L.attn = AttentionBlock(w, layout_, a);
      MlpSpec m;
      m.prefix = p + "mlp.";
      m.intermediate_size = cfg.intermediate_size;
      m.act = Activation::GeluTanh;
      L.mlp = GatedMlp(w, layout_, m);
    }
    final_norm_ = RmsNorm(w, p0 + "norm.weight", h, eps, 1.0f);
    lm_head_ = LmHead(w, &embed_);
    rope_global_ = RotaryCache(backend, cfg);
    if (gemma3_) {
      // Gemma 3's sliding layers: RoPE base rope_local_base_freq, no scaling.
      ModelConfig local = cfg;
      local.rope_theta = cfg.rope_local_base_freq.value_or(10000.0);
      local.rope_scaling = RopeScaling{};
      rope_local_ = RotaryCache(backend, local);
    }
  }


  // Per layer (transformers' Gemma2DecoderLayer): x += post_attn_norm(attn(input_norm(x)));
  // x += post_ff_norm(mlp(pre_ff_norm(x))). Each "x += y; y = norm(x)" is one fused add-norm:
  // `carry` holds the branch output still to be added into the residual stream.
  DeviceTensor forward(const ForwardInputs& in, std::vector<KvCacheLayer>& kv) override {
    check_cache(kv);
    bind_lora(in);
    const int64_t t = in.token_ids.shape[0];
    const int64_t h = cfg_.hidden_size;
    ForwardScratch scratch(backend_, t);
    DeviceTensor residual = backend_.empty(backend_.activation_dtype(), {t, h});  // [T, hidden]
    DeviceTensor carry = backend_.empty(backend_.activation_dtype(), {t, h});     // [T, hidden]
    DeviceTensor branch = backend_.empty(backend_.activation_dtype(), {t, h});    // [T, hidden]

    embed_.forward(backend_, in.token_ids, residual.view);
    backend_.scale_and_cap(residual.view, std::sqrt(static_cast<float>(h)), 0.0f);
    dump("embed", residual.view);
    for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
      const GemmaLayer& L = layers_[i];
      const Dumper d = dumper("layers." + std::to_string(i) + ".");
      if (i == 0) {
        L.input_norm.forward(backend_, residual.view, carry.view);
      } else {
        L.input_norm.add_forward(backend_, carry.view, residual.view);
      }
      d("input_norm", carry.view);
      L.attn.forward(backend_, carry.view, in, kv[i], L.sliding && gemma3_ ? rope_local_ : rope_global_, scratch,
                     branch.view, d);
      L.post_attn_norm.forward(backend_, branch.view, carry.view);
      d("post_attn_norm", carry.view);
      L.pre_ff_norm.add_forward(backend_, carry.view, residual.view);
      d("residual_mid", residual.view);
      L.mlp.forward(backend_, carry.view, scratch, branch.view, d);
      L.post_ff_norm.forward(backend_, branch.view, carry.view);
      d("post_ff_norm", carry.view);
    }
    final_norm_.add_forward(backend_, carry.view, residual.view);
    dump("final_norm", carry.view);
    DeviceTensor logits = lm_head_.forward_selected(backend_, carry.view, in.logits_indices);
    if (cfg_.final_logit_softcapping > 0) {
      backend_.scale_and_cap(logits.view, 1.0f, static_cast<float>(cfg_.final_logit_softcapping));
    }
    dump("logits", logits.view);
    return logits;
  }

 private:
  bool gemma3_ = false;
  VocabParallelEmbedding embed_;
  std::vector<GemmaLayer> layers_;
  RmsNorm final_norm_;
  LmHead lm_head_;
  RotaryCache rope_global_, rope_local_;
};

}  // namespace

std::unique_ptr<Model> create_gemma_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                          const ModelBuildOptions& options) {
  return std::make_unique<GemmaModel>(cfg, weights, backend, options);
}

}  // namespace cypris
