#include "models/cohere.h"

#include <algorithm>

#include "engine/common/error.h"
#include "models/layers/attention.h"
#include "models/layers/common.h"
#include "models/layers/decoder_model.h"
#include "models/layers/mlp.h"
#include "models/layers/vocab_parallel.h"

namespace cypris {
namespace {

// Cohere's LayerNorm without bias, from the RMSNorm op: LN(x) * w = rms_norm(x - mean(x)) * w, since
// the variance is the mean square of the centred row. The centring is a GEMM by (I - 1/H); a
// dedicated layer_norm Backend op would save that GEMM (H² multiply-adds per token and norm).
class BiaslessLayerNorm {
 public:
  BiaslessLayerNorm() = default;
  BiaslessLayerNorm(const WeightLoader& w, const std::string& name, int64_t h, float eps, const DeviceTensor* centre)
      : norm_(w, name, h, eps), centre_(centre) {}
  void forward(Backend& b, const Tensor& x, Tensor& centred, Tensor& out) const {
    b.linear(x, centre_->view, nullptr, centred);
    norm_.forward(b, centred, out);
  }

 private:
  RmsNorm norm_;
  const DeviceTensor* centre_ = nullptr;
};

struct CohereLayer {
  BiaslessLayerNorm input_norm;
  AttentionBlock attn;
  GatedMlp mlp;
};

class CohereModel : public DecoderModel {
 public:
  CohereModel(const ModelConfig& cfg, const WeightSource& weights, Backend& backend, const ModelBuildOptions& opt)
      : DecoderModel(cfg, backend, opt) {
    const std::string& arch = cfg.architectures.front();
    CYPRIS_CHECK(cfg.hidden_act == "silu", "{}: {} uses a SiLU MLP, but hidden_act is {}", cfg.source, arch,
                 cfg.hidden_act);
    logit_scale_ = static_cast<float>(cfg.logit_scale);
    const bool cohere2 = arch == "Cohere2ForCausalLM";
    const WeightLoader w(cfg_, weights, backend, opt_);
    const int64_t h = cfg.hidden_size;
    const float eps = static_cast<float>(cfg.layer_norm_eps);
    std::vector<float> c(static_cast<size_t>(h * h), -1.0f / static_cast<float>(h));
    for (int64_t i = 0; i < h; ++i) c[i * h + i] += 1.0f;
    centre_ = backend.upload(c.data(), DType::F32, {h, h});
    embed_ = VocabParallelEmbedding(w, "model.embed_tokens.weight");
    layers_.resize(cfg.num_hidden_layers);
    for (int i = 0; i < cfg.num_hidden_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      CohereLayer& L = layers_[i];
      L.input_norm = BiaslessLayerNorm(w, p + "input_layernorm.weight", h, eps, &centre_);
      AttentionSpec a;
      a.prefix = p + "self_attn.";
      a.qkv_bias = a.o_bias = cfg.qkv_bias;
      a.interleaved_rope = true;
      if (cfg.use_qk_norm) {  // Command R+: per-head LayerNorms of q and k before rotary
        a.q_norm = "q_norm.weight";
        a.k_norm = "k_norm.weight";
        a.qk_layer_norm = true;
        a.qk_norm_eps = eps;
      }
      // Cohere 2's global layers (no window) have no rotary either.
      const int window = cfg.layer_sliding_window[i];
      a.sliding_window = window;
      a.rope = !cohere2 || window > 0;
      L.attn = AttentionBlock(w, layout_, a);
      MlpSpec m;
      m.prefix = p + "mlp.";
      m.intermediate_size = cfg.intermediate_size;
      L.mlp = GatedMlp(w, layout_, m);
    }
    final_norm_ = BiaslessLayerNorm(w, "model.norm.weight", h, eps, &centre_);
    lm_head_ = LmHead(w, cfg.tie_word_embeddings ? &embed_ : nullptr);
    rope_ = RotaryCache(backend, cfg);
  }


  DeviceTensor forward(const ForwardInputs& in, std::vector<KvCacheLayer>& kv) override {
    check_cache(kv);
    bind_lora(in);
    const int64_t t = in.token_ids.shape[0];
    const int64_t h = cfg_.hidden_size;
    ForwardScratch scratch(backend_, t);
    DeviceTensor residual = backend_.empty(backend_.activation_dtype(), {t, h});  // [T, hidden]
    DeviceTensor normed = backend_.empty(backend_.activation_dtype(), {t, h});
    DeviceTensor centred = backend_.empty(backend_.activation_dtype(), {t, h});
    DeviceTensor attn = backend_.empty(backend_.activation_dtype(), {t, h});
    DeviceTensor mlp = backend_.empty(backend_.activation_dtype(), {t, h});

    embed_.forward(backend_, in.token_ids, residual.view);
    dump("embed", residual.view);
    for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
      const CohereLayer& L = layers_[i];
      const Dumper d = dumper("layers." + std::to_string(i) + ".");
      L.input_norm.forward(backend_, residual.view, centred.view, normed.view);
      d("input_norm", normed.view);
      // One all-reduce for both branches: each leaves its rank's partial sum.
      L.attn.forward(backend_, normed.view, in, kv[i], rope_, scratch, attn.view, d, /*reduce=*/false);
      L.mlp.forward(backend_, normed.view, scratch, mlp.view, d, /*reduce=*/false);
      backend_.add(mlp.view, attn.view);
      tp_all_reduce(opt_, attn.view);
      d("attn_plus_mlp", attn.view);
      backend_.add(attn.view, residual.view);
      d("residual", residual.view);
    }
    final_norm_.forward(backend_, residual.view, centred.view, normed.view);
    dump("final_norm", normed.view);
    DeviceTensor logits = lm_head_.forward_selected(backend_, normed.view, in.logits_indices);
    backend_.scale_and_cap(logits.view, logit_scale_, 0.0f);
    dump("logits", logits.view);
    return logits;
  }

 private:
  float logit_scale_ = 1.0f;
  DeviceTensor centre_;  // F32 [hidden, hidden] = I - 1/hidden
  VocabParallelEmbedding embed_;
  std::vector<CohereLayer> layers_;
  BiaslessLayerNorm final_norm_;
  LmHead lm_head_;
  RotaryCache rope_;
};

}  // namespace

std::unique_ptr<Model> create_cohere_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                           const ModelBuildOptions& options) {
  return std::make_unique<CohereModel>(cfg, weights, backend, options);
}

}  // namespace cypris
