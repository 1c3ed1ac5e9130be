// Phi-3 / Phi-3.5 / Phi-4 (Phi3ForCausalLM): the Llama decoder with q/k/v stored as one fused
// qkv_proj and gate/up as one gate_up_proj (each rank takes its row ranges of them), partial
// rotary where configured, and su/longrope RoPE scaling (models/rope.cpp).
#pragma once

#include <memory>

#include "engine/loader/weights.h"
#include "models/model.h"

namespace cypris {

std::unique_ptr<Model> create_phi3_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                         const ModelBuildOptions& options);

// Phi3ForCausalLM's config fields and GGUF architecture (model_family.h).
const ModelFamily& phi3_family();

}  // namespace cypris
