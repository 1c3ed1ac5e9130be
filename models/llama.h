// The Llama decoder written once against the Backend ops; it also serves Mistral (sliding
// window) and Qwen2 (q/k/v biases, per-layer sliding window) since they differ only in config.
#pragma once

#include <memory>

#include "engine/loader/weights.h"
#include "models/model.h"

namespace cypris {

// Loads the weights (HF names, "model." prefix optional) through `weights` with tensor-parallel
// shard specs, and returns the model. Throws Error naming the tensor when one is missing or wrong.
std::unique_ptr<Model> create_llama_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                          const ModelBuildOptions& options);

// LlamaForCausalLM and MistralForCausalLM's config fields and GGUF architecture (model_family.h).
const ModelFamily& llama_family();

// What a Llama-shaped family changes in the pre-norm decoder (models/qwen3.cpp uses it).
struct LlamaVariant {
  bool qk_norm = false;  // per-head RMSNorm of q and k before rotary ("self_attn.q_norm.weight")
  // Checkpoints that store q/k/v and gate/up fused (Phi-3): the fused tensors' names; empty: separate.
  std::string fused_qkv, fused_gate_up;
  // The sparse MLP of the layers cfg.layer_is_moe marks (Qwen3-MoE's names; Mixtral's differ).
  std::string moe_block = "mlp.";
  std::string moe_gate = "gate_proj.weight", moe_up = "up_proj.weight", moe_down = "down_proj.weight";
};
std::unique_ptr<Model> create_llama_style_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                                const ModelBuildOptions& options, const LlamaVariant& variant);

}  // namespace cypris
