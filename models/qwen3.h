// Qwen3 (dense) and Qwen3-MoE: the Llama decoder with a per-head RMSNorm of q and k before
// rotary, no q/k/v biases unless attention_bias, head_dim given by the config; Qwen3-MoE's sparse
// layers route each token to its top num_experts_per_tok of num_experts SiLU experts. Qwen2-MoE
// (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2 attention (q/k/v biases) and the same routed experts plus a
// shared expert every token runs, scaled by a sigmoid gate.
#pragma once

#include <memory>

#include "engine/loader/weights.h"
#include "models/model.h"

namespace cypris {

std::unique_ptr<Model> create_qwen3_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                          const ModelBuildOptions& options);

std::unique_ptr<Model> create_qwen3_moe_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                              const ModelBuildOptions& options);

std::unique_ptr<Model> create_qwen2_moe_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                              const ModelBuildOptions& options);

// Config fields and GGUF architectures (model_family.h): Qwen2ForCausalLM (built by
// create_llama_model) and Qwen2MoeForCausalLM; Qwen3ForCausalLM and Qwen3MoeForCausalLM.
const ModelFamily& qwen2_family();
const ModelFamily& qwen3_family();

}  // namespace cypris
