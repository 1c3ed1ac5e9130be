#include "models/gemma.h"

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
    load_embedding(w, p0 + "embed_tokens.weight");
    layers_.resize(cfg.num_hidden_layers);
    for (int i = first_layer(); i < end_layer(); ++i) {
      weights_of_layer(i);
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
    weights_of_layer(-1);
    if (last_stage()) final_norm_ = RmsNorm(w, p0 + "norm.weight", h, eps, 1.0f);
    load_lm_head(w, /*tied=*/true);
    rope_global_ = RotaryCache(backend, cfg);
    if (gemma3_) {
      // Gemma 3's sliding layers: RoPE base rope_local_base_freq, no scaling.
      ModelConfig local = cfg;
      local.rope_theta = cfg.rope_local_base_freq.value_or(10000.0);
      local.rope_scaling = RopeScaling{};
      rope_local_ = RotaryCache(backend, local);
    }
  }


  void scale_embedding(Tensor& residual) override {
    backend_.scale_and_cap(residual, std::sqrt(static_cast<float>(cfg_.hidden_size)), 0.0f);
  }

  // Per layer (transformers' Gemma2DecoderLayer): x += post_attn_norm(attn(input_norm(x)));
  // x += post_ff_norm(mlp(pre_ff_norm(x))). Each "x += y; y = norm(x)" is one fused add-norm:
  // the stream's `hidden` (carry) holds the branch output still to be added into the residual.
  void layer_forward(int i, LayerStream& s, const ForwardInputs& in, KvCacheLayer& kv, ForwardScratch& scratch,
                     const Dumper& d) override {
    const GemmaLayer& L = layers_[i];
    Tensor& residual = s.residual.view;
    Tensor& carry = s.hidden.view;
    Tensor& branch = scratch.get("gemma.branch", cfg_.hidden_size);  // [T, hidden]
    if (i == 0) {
      L.input_norm.forward(backend_, residual, carry);
    } else {
      L.input_norm.add_forward(backend_, carry, residual);
    }
    d("input_norm", carry);
    L.attn.forward(backend_, carry, in, kv, L.sliding && gemma3_ ? rope_local_ : rope_global_, scratch, branch, d);
    L.post_attn_norm.forward(backend_, branch, carry);
    d("post_attn_norm", carry);
    L.pre_ff_norm.add_forward(backend_, carry, residual);
    d("residual_mid", residual);
    L.mlp.forward(backend_, carry, scratch, branch, d);
    L.post_ff_norm.forward(backend_, branch, carry);
    d("post_ff_norm", carry);
  }

  void final_norm(LayerStream& s, ForwardScratch&) override {
    final_norm_.add_forward(backend_, s.hidden.view, s.residual.view);
  }

  void finish_logits(Tensor& logits) override {
    if (cfg_.final_logit_softcapping > 0) {
      backend_.scale_and_cap(logits, 1.0f, static_cast<float>(cfg_.final_logit_softcapping));
    }
  }

 private:
  bool gemma3_ = false;
  std::vector<GemmaLayer> layers_;
  RmsNorm final_norm_;
  RotaryCache rope_global_, rope_local_;
};

}  // namespace

std::unique_ptr<Model> create_gemma_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                          const ModelBuildOptions& options) {
  return std::make_unique<GemmaModel>(cfg, weights, backend, options);
}

}  // namespace cypris

// Gemma's config: tied embeddings by default (Gemma2Config, Gemma3TextConfig), "gelu" meaning the tanh
// approximation, the softmax scale query_pre_attn_scalar^-0.5, attention and final-logit soft-capping,
// Gemma 3's RoPE base of the sliding layers; which layers slide. GGUF: llama.cpp's converter stores
// every norm with the "1 +" folded in and names a layer's four norms attn_norm /
// post_attention_norm / ffn_norm (pre-feedforward) / post_ffw_norm; the gelu-tanh MLP, Gemma 3's
// sliding-window pattern and local rope base are fixed by llama.cpp, not in the file.
namespace cypris {
namespace {

void read_gemma_config(const ConfigFields& f, ModelConfig& c) {
  if (f.has("query_pre_attn_scalar")) {
    c.query_pre_attn_scalar = f.get_double("query_pre_attn_scalar");
    CYPRIS_CHECK(*c.query_pre_attn_scalar > 0, "{}: query_pre_attn_scalar must be positive", f.source());
  }
  c.attn_logit_softcapping = f.get_double("attn_logit_softcapping", 0.0);
  c.final_logit_softcapping = f.get_double("final_logit_softcapping", 0.0);
  CYPRIS_CHECK(c.attn_logit_softcapping >= 0 && c.final_logit_softcapping >= 0,
               "{}: attn_logit_softcapping and final_logit_softcapping must be >= 0 or null", f.source());
  c.rope_local_base_freq = f.get_opt_double("rope_local_base_freq");
  CYPRIS_CHECK(!c.rope_local_base_freq || *c.rope_local_base_freq > 0, "{}: rope_local_base_freq must be positive",
               f.source());
}

// Gemma 2: the even layers slide.
void gemma2_sliding_layers(const ConfigFields&, ModelConfig& c, int window) {
  for (int i = 0; i < c.num_hidden_layers; i += 2) c.layer_sliding_window[i] = window;
}

// Gemma 3: every sliding_window_pattern-th layer is global, the others slide.
void gemma3_sliding_layers(const ConfigFields& f, ModelConfig& c, int window) {
  const int64_t pattern = f.get_int("sliding_window_pattern", 6);
  CYPRIS_CHECK(pattern > 0, "{}: sliding_window_pattern must be positive", f.source());
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    if ((i + 1) % pattern != 0) c.layer_sliding_window[i] = window;
  }
}

constexpr GgufNameMap kGemmaLayerNames[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};

// The query scale, as llama.cpp derives it (the file leaves query_pre_attn_scalar out):
// 1/sqrt(head_dim), except for the 27B sizes (46 layers for Gemma 2, 62 for Gemma 3), where it is
// 1/sqrt(hidden / heads).
void gemma_query_scalar(nlohmann::json& j, int layers_27b) {
  const int64_t layers = j.at("num_hidden_layers").get<int64_t>();
  const int64_t heads = j.at("num_attention_heads").get<int64_t>();
  const int64_t hidden = j.at("hidden_size").get<int64_t>();
  j["query_pre_attn_scalar"] = layers == layers_27b    ? hidden / heads
                               : j.contains("head_dim") ? j.at("head_dim").get<int64_t>()
                                                        : hidden / heads;
}

ModelFamily gemma_family(std::string_view name, GgufArchitecture gguf,
                         void (*sliding)(const ConfigFields&, ModelConfig&, int)) {
  ModelFamily m;
  m.name = name;
  m.tied_embeddings = true;
  m.gelu_is_tanh = true;
  m.sliding_layers = sliding;
  m.read_config = read_gemma_config;
  gguf.gemma_norms = true;
  gguf.layer_names = kGemmaLayerNames;
  m.gguf = {gguf};
  return m;
}

}  // namespace

const ModelFamily& gemma2_family() {
  static const ModelFamily f = [] {
    GgufArchitecture g{"gemma2", "Gemma2ForCausalLM", "gemma2"};
    g.fixed_config = R"({"hidden_activation": "gelu_pytorch_tanh"})";
    g.adjust = [](const GgufModel&, nlohmann::json& j) { gemma_query_scalar(j, 46); };
    return gemma_family("gemma2", g, gemma2_sliding_layers);
  }();
  return f;
}

const ModelFamily& gemma3_family() {
  static const ModelFamily f = [] {
    GgufArchitecture g{"gemma3", "Gemma3ForCausalLM", "gemma3_text"};
    g.fixed_config =
        R"({"hidden_activation": "gelu_pytorch_tanh", "sliding_window_pattern": 6, "rope_local_base_freq": 10000.0})";
    g.adjust = [](const GgufModel&, nlohmann::json& j) { gemma_query_scalar(j, 62); };
    return gemma_family("gemma3", g, gemma3_sliding_layers);
  }();
  return f;
}

}  // namespace cypris
