// Mixtral: the Mistral decoder whose every MLP is a sparse mixture of SiLU experts
// (block_sparse_moe: router "gate", experts' w1 = gate, w3 = up, w2 = down), top-k gates always
// renormalised.
#pragma once

#include <memory>

#include "engine/loader/weights.h"
#include "models/model.h"

namespace cypris {

std::unique_ptr<Model> create_mixtral_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                            const ModelBuildOptions& options);

// MixtralForCausalLM's config fields (model_family.h).
const ModelFamily& mixtral_family();

}  // namespace cypris
