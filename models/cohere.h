// Command-R (CohereForCausalLM) and Command-R7B / Command-A (Cohere2ForCausalLM): LayerNorm without
// bias, attention and MLP in parallel on the same normed input (x += attn(n) + mlp(n)), GPT-J
// style (interleaved) rotary, tied head with logits times logit_scale; Cohere 2 interleaves
// sliding-window layers (with rotary) and global layers (no positional rotation).
#pragma once

#include <memory>

#include "engine/loader/weights.h"
#include "models/model.h"

namespace cypris {

std::unique_ptr<Model> create_cohere_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                           const ModelBuildOptions& options);

// CohereForCausalLM's and Cohere2ForCausalLM's config fields and GGUF architectures (model_family.h).
const ModelFamily& cohere_family();
const ModelFamily& cohere2_family();

}  // namespace cypris
