// The model's architecture as read from a Hugging Face config.json (+ generation_config.json),
// with the user's overrides (--rope-scaling, --rope-theta, --max-model-len, --disable-sliding-window)
// applied and checked. A --max-model-len past max_position_embeddings of a model without rope
// scaling turns on dynamic NTK scaling by the ratio (Aphrodite's "automatic RoPE scaling"), logged;
// --disable-sliding-window caps the context at the smallest window and makes every layer attend to
// all of it (vLLM), so the outputs equal the windowed ones.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/loader/model_family.h"

namespace cypris {

// HF `rope_scaling` ("rope_type" or legacy "type"): default, linear, dynamic, yarn, llama3, longrope
// (Phi-3's "su" is read as longrope).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  std::optional<double> original_max_position_embeddings;
  double low_freq_factor = 1.0;            // llama3
  double high_freq_factor = 4.0;           // llama3
  std::optional<double> attention_factor;  // yarn
  std::optional<double> beta_fast;         // yarn (HF: `or 32`)
  std::optional<double> beta_slow;         // yarn (HF: `or 1`)
  std::optional<double> mscale;            // yarn
  std::optional<double> mscale_all_dim;    // yarn
  bool truncate = true;                    // yarn
  std::vector<double> short_factor;        // longrope: [rotary_dim / 2], positions below the original length
  std::vector<double> long_factor;         // longrope: [rotary_dim / 2], positions from it on
};

struct ModelConfig {
  std::string source;  // the config.json path, for messages
  std::vector<std::string> architectures;
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;                  // Qwen2 always; Llama when attention_bias
  bool o_bias = false;                    // Llama attention_bias
  bool mlp_bias = false;                  // Llama mlp_bias
  std::string hidden_act = "silu";        // the MLP's gate activation: silu or gelu_tanh
  std::string torch_dtype;                // "float32", "float16", "bfloat16" or "" when absent
  std::vector<int> layer_sliding_window;  // [num_hidden_layers], 0 = full attention
  // Gemma 2 / 3: softmax scale query_pre_attn_scalar^-0.5, tanh soft-capping of the attention
  // scores and of the final logits (0 = off), and the RoPE base of the sliding-window layers.
  std::optional<double> query_pre_attn_scalar;
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;
  std::optional<double> rope_local_base_freq;
  // Mixture of experts (Qwen3-MoE, Mixtral): num_experts routed experts per MoE layer, the top
  // num_experts_per_tok per token, gates renormalised over those when norm_topk_prob. Qwen3-MoE's
  // experts have moe_intermediate_size; layers in mlp_only_layers (or off decoder_sparse_step) are dense.
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  // Qwen2-MoE's shared expert: a dense gated MLP of this width that every token runs, scaled by
  // sigmoid(shared_expert_gate · x) and added to the routed experts' sum; 0 when there is none.
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;
  // Cohere / Cohere 2: LayerNorm (no bias) epsilon, the logits' scale, Command R+'s per-head q/k
  // LayerNorm.
  double layer_norm_eps = 1e-5;
  double logit_scale = 0.0625;  // CohereConfig's default
  bool use_qk_norm = false;
  std::vector<bool> layer_is_moe;  // [num_hidden_layers]
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // generation_config.json first, else config.json
  int64_t max_model_len = 0;           // resolved: --max-model-len or max_position_embeddings

  int rotary_dim() const { return static_cast<int>(head_dim * partial_rotary_factor); }
  // Weight parameters from the shapes (attention, MLPs or experts with their routers, embeddings,
  // norms; biases left out): all of them, and those one token uses (a MoE token runs top-k of its
  // experts), for reports such as `cypris bench latency`.
  struct ParameterCount {
    double total = 0;
    double active = 0;
  };
  ParameterCount approx_parameters() const;
};

struct ConfigOverrides {
  std::optional<std::string> rope_scaling_json;  // --rope-scaling (JSON object)
  std::optional<double> rope_theta;              // --rope-theta
  std::optional<int64_t> max_model_len;          // --max-model-len
  bool disable_sliding_window = false;           // --disable-sliding-window
};

// Reads DIR/config.json and, when present, DIR/generation_config.json; for a .gguf file, its
// metadata (gguf_model.h). The fields every family shares are read here, the rest by the model's
// family in `families` (model_family.h; models/registry's model_families()). Throws Error naming the
// file and field for anything missing, malformed or unsupported.
ModelConfig load_model_config(const ModelFamilies& families, const std::filesystem::path& dir,
                              const ConfigOverrides& overrides = {});

// The same from JSON text (source names it in messages); generation_json may be empty.
ModelConfig parse_model_config(const ModelFamilies& families, const std::string& config_json,
                               const std::string& source, const ConfigOverrides& overrides = {},
                               const std::string& generation_json = "");

// Parses a rope_scaling JSON object (as in config.json or --rope-scaling). Throws Error naming source.
RopeScaling parse_rope_scaling(const std::string& json_text, const std::string& source);

// The most positions a model may have (max_position_embeddings, and any max_model_len rope
// scaling allows): 2^24, past every released model, so sizes derived from it cannot overflow.
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;

// The longest context the config allows: max_position_embeddings, or more with rope scaling.
int64_t max_allowed_model_len(const ModelConfig& cfg);

}  // namespace cypris
