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

}  // namespace cypris
