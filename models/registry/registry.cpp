#include "models/registry/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/common/error.h"
#include "models/cohere.h"
#include "models/gemma.h"
#include "models/llama.h"
#include "models/mixtral.h"
#include "models/phi3.h"
#include "models/qwen3.h"

namespace cypris {
namespace {

using Builder = std::unique_ptr<Model> (*)(const ModelConfig&, const WeightSource&, Backend&, const ModelBuildOptions&);

// An explicit table rather than self-registration: static initialisers in a static library are
// dropped by the linker when nothing references their object file. One row per architecture name:
// the model's builder and its family (config.json fields, GGUF architectures; engine/loader/model_family.h).
// A family's rows are consecutive.
struct Entry {
  const char* architecture;
  Builder build;
  const ModelFamily& (*family)();
};

const Entry kModels[] = {
    {"LlamaForCausalLM", create_llama_model, llama_family},
    {"MistralForCausalLM", create_llama_model, llama_family},
    {"Qwen2ForCausalLM", create_llama_model, qwen2_family},
    {"Qwen2MoeForCausalLM", create_qwen2_moe_model, qwen2_family},
    {"Qwen3ForCausalLM", create_qwen3_model, qwen3_family},
    {"Qwen3MoeForCausalLM", create_qwen3_moe_model, qwen3_family},
    {"MixtralForCausalLM", create_mixtral_model, mixtral_family},
    {"Phi3ForCausalLM", create_phi3_model, phi3_family},
    {"CohereForCausalLM", create_cohere_model, cohere_family},
    {"Cohere2ForCausalLM", create_cohere_model, cohere2_family},
    {"Gemma2ForCausalLM", create_gemma_model, gemma2_family},
    {"Gemma3ForCausalLM", create_gemma_model, gemma3_family},
    {"Gemma3ForConditionalGeneration", create_gemma_model, gemma3_family},  // the text model; no vision weights
};

}  // namespace

const ModelFamilies& model_families() {
  static const ModelFamilies rows = [] {
    ModelFamilies r;
    for (const auto& e : kModels) r.push_back({e.architecture, &e.family()});
    return r;
  }();
  return rows;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& e : kModels) out.emplace_back(e.architecture);
  return out;
}

std::string resolve_architecture(const ModelConfig& cfg) {
  for (const auto& a : cfg.architectures) {
    for (const auto& e : kModels) {
      if (a == e.architecture) return a;
    }
  }
  CYPRIS_FAIL("{}: architecture {} is not supported; supported architectures: {}", cfg.source,
              fmt::join(cfg.architectures, ", "), fmt::join(supported_architectures(), ", "));
}

std::unique_ptr<Model> build_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                   const ModelBuildOptions& options) {
  const std::string arch = resolve_architecture(cfg);
  for (const auto& e : kModels) {
    if (arch == e.architecture) return e.build(cfg, weights, backend, options);
  }
  CYPRIS_FAIL("unreachable: architecture {}", arch);
}

}  // namespace cypris
