// Gemma 2 and Gemma 3 (text; also the language model inside Gemma3ForConditionalGeneration
// checkpoints): embeddings scaled by sqrt(hidden), sandwich RMSNorms with (1 + w) weights around
// attention and MLP, GeGLU (gelu-tanh) MLP, softmax scale query_pre_attn_scalar^-0.5, attention
// and final-logit tanh soft-capping, sliding-window layers alternating with global ones. Gemma 3
// adds per-head q/k norms and gives the sliding layers their own RoPE base (rope_local_base_freq).
#pragma once

#include <memory>

#include "engine/loader/weights.h"
#include "models/model.h"

namespace cypris {

std::unique_ptr<Model> create_gemma_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                          const ModelBuildOptions& options);

// Gemma2ForCausalLM's, and Gemma3ForCausalLM's / Gemma3ForConditionalGeneration's, config fields and
// GGUF architectures (model_family.h).
const ModelFamily& gemma2_family();
const ModelFamily& gemma3_family();

}  // namespace cypris
