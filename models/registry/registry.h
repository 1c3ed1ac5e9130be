// Hugging Face `architectures` name -> model builder and model family. An unknown architecture is an
// Error that lists the supported ones. model_families() is what the loader's readers take
// (load_model_config, open_weight_source, the GGUF readers): each family's config fields and GGUF
// architectures, defined next to its model file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/loader/weights.h"
#include "models/model.h"

namespace cypris {

std::vector<std::string> supported_architectures();

// Every architecture name with its family (engine/loader/model_family.h), in the registry's order.
const ModelFamilies& model_families();

// The first supported name in cfg.architectures, or Error naming config.json and listing the
// supported architectures.
std::string resolve_architecture(const ModelConfig& cfg);

std::unique_ptr<Model> build_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                   const ModelBuildOptions& options);

}  // namespace cypris
