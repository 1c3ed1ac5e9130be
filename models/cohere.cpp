#include "models/cohere.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/loader/gguf.h"
#include "models/layers/attention.h"
#include "models/layers/common.h"
#include "models/layers/decoder_model.h"
#include "models/layers/mlp.h"
#include "models/layers/vocab_parallel.h"

namespace cypris {
namespace {

// Cohere's LayerNorm without bias (Backend::layer_norm).
class BiaslessLayerNorm {
 public:
  BiaslessLayerNorm() = default;
  BiaslessLayerNorm(const WeightLoader& w, const std::string& name, int64_t h, float eps)
      : weight_(w.load_f32(name, {h})), eps_(eps) {}
  void forward(Backend& b, const Tensor& x, Tensor& out) const { b.layer_norm(x, weight_.view, nullptr, eps_, out); }

 private:
  DeviceTensor weight_;  // F32 [hidden]
  float eps_ = 1e-5f;
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
    load_embedding(w, "model.embed_tokens.weight");
    layers_.resize(cfg.num_hidden_layers);
    for (int i = first_layer(); i < end_layer(); ++i) {
      weights_of_layer(i);
      const std::string p = "model.layers." + std::to_string(i) + ".";
      CohereLayer& L = layers_[i];
      L.input_norm = BiaslessLayerNorm(w, p + "input_layernorm.weight", h, eps);
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
    weights_of_layer(-1);
    if (last_stage()) final_norm_ = BiaslessLayerNorm(w, "model.norm.weight", h, eps);
    load_lm_head(w, cfg.tie_word_embeddings);
    rope_ = RotaryCache(backend, cfg);
  }


  // The parallel block: x += attn(norm(x)) + mlp(norm(x)). The stream's `hidden` holds norm(x).
  void layer_forward(int i, LayerStream& s, const ForwardInputs& in, KvCacheLayer& kv, ForwardScratch& scratch,
                     const Dumper& d) override {
    const CohereLayer& L = layers_[i];
    const int64_t h = cfg_.hidden_size;
    Tensor& normed = s.hidden.view;
    Tensor& attn = scratch.get("cohere.attn_out", h);
    Tensor& mlp = scratch.get("cohere.mlp_out", h);
    L.input_norm.forward(backend_, s.residual.view, normed);
    d("input_norm", normed);
    // One all-reduce for both branches: each leaves its rank's partial sum.
    L.attn.forward(backend_, normed, in, kv, rope_, scratch, attn, d, /*reduce=*/false);
    L.mlp.forward(backend_, normed, scratch, mlp, d, /*reduce=*/false);
    backend_.add(mlp, attn);
    tp_all_reduce(opt_, attn);
    d("attn_plus_mlp", attn);
    backend_.add(attn, s.residual.view);
    d("residual", s.residual.view);
  }

  void final_norm(LayerStream& s, ForwardScratch& scratch) override {
    final_norm_.forward(backend_, s.residual.view, s.hidden.view);
  }

  void finish_logits(Tensor& logits) override { backend_.scale_and_cap(logits, logit_scale_, 0.0f); }

 private:
  float logit_scale_ = 1.0f;
  std::vector<CohereLayer> layers_;
  BiaslessLayerNorm final_norm_;
  RotaryCache rope_;
};

}  // namespace

std::unique_ptr<Model> create_cohere_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                           const ModelBuildOptions& options) {
  return std::make_unique<CohereModel>(cfg, weights, backend, options);
}

}  // namespace cypris

// Cohere's config: tied embeddings by default (CohereConfig), the LayerNorm epsilon, the logits'
// scale, Command R+'s per-head q/k LayerNorm; Cohere 2's every fourth layer is global. GGUF:
// Command-R / Command R7B with LayerNorm without bias, logit_scale, interleaved rotary on the
// checkpoint's own row order (not permuted).
namespace cypris {
namespace {

void read_cohere_config(const ConfigFields& f, ModelConfig& c) {
  c.layer_norm_eps = f.get_double("layer_norm_eps", 1e-5);
  c.logit_scale = f.get_double("logit_scale", 0.0625);
  c.use_qk_norm = f.get_bool("use_qk_norm", false);
  CYPRIS_CHECK(c.layer_norm_eps > 0 && std::isfinite(c.logit_scale),
               "{}: layer_norm_eps must be positive and logit_scale finite", f.source());
}

// Cohere 2: every sliding_window_pattern-th layer is global (and has no rotary), the others slide.
void cohere2_sliding_layers(const ConfigFields& f, ModelConfig& c, int window) {
  const int64_t pattern = f.get_int("sliding_window_pattern", 4);
  CYPRIS_CHECK(pattern > 0, "{}: sliding_window_pattern must be positive", f.source());
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    if ((i + 1) % pattern != 0) c.layer_sliding_window[i] = window;
  }
}

ModelFamily cohere_family(std::string_view name, GgufArchitecture gguf,
                          void (*sliding)(const ConfigFields&, ModelConfig&, int)) {
  ModelFamily m;
  m.name = name;
  m.tied_embeddings = true;
  m.sliding_layers = sliding;
  m.read_config = read_cohere_config;
  m.gguf = {gguf};
  return m;
}

}  // namespace

const ModelFamily& cohere_family() {
  static const ModelFamily f = [] {
    GgufArchitecture g{"command-r", "CohereForCausalLM", "cohere"};
    // Command R+: per-head q/k LayerNorms (attn_q_norm / attn_k_norm, [heads, head_dim]).
    g.adjust = [](const GgufModel& m, nlohmann::json& j) {
      if (m.tensor("blk.0.attn_q_norm.weight")) j["use_qk_norm"] = true;
    };
    return cohere_family("cohere", g, nullptr);
  }();
  return f;
}

const ModelFamily& cohere2_family() {
  static const ModelFamily f = [] {
    GgufArchitecture g{"cohere2", "Cohere2ForCausalLM", "cohere2"};
    g.fixed_config = R"({"sliding_window_pattern": 4})";
    return cohere_family("cohere2", g, cohere2_sliding_layers);
  }();
  return f;
}

}  // namespace cypris
