// Hugging Face `architectures` name -> model builder. An unknown architecture is an Error that
// lists the supported ones.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/loader/weights.h"
#include "models/model.h"

namespace cypris {

std::vector<std::string> supported_architectures();

// The first supported name in cfg.architectures, or Error naming config.json and listing the
// supported architectures.
std::string resolve_architecture(const ModelConfig& cfg);

std::unique_ptr<Model> build_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                   const ModelBuildOptions& options);

}  // namespace cypris
