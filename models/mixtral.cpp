#include "models/mixtral.h"

#include "engine/common/error.h"
#include "models/llama.h"

namespace cypris {

std::unique_ptr<Model> create_mixtral_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                            const ModelBuildOptions& options) {
  CYPRIS_CHECK(cfg.num_experts > 0, "{}: MixtralForCausalLM needs num_local_experts", cfg.source);
  LlamaVariant v;
  v.moe_block = "block_sparse_moe.";
  v.moe_gate = "w1.weight";
  v.moe_up = "w3.weight";
  v.moe_down = "w2.weight";
  return create_llama_style_model(cfg, weights, backend, options, v);
}

}  // namespace cypris

namespace cypris {
namespace {

// Mixtral always renormalises the top-k gates (it has no norm_topk_prob field).
void read_mixtral_config(const ConfigFields&, ModelConfig& c) {
  if (c.num_experts > 0) c.norm_topk_prob = true;
}

}  // namespace

const ModelFamily& mixtral_family() {
  static const ModelFamily f = [] {
    ModelFamily m;
    m.name = "mixtral";
    m.read_config = read_mixtral_config;  // GGUF: a "llama" file with experts (llama_family)
    return m;
  }();
  return f;
}

}  // namespace cypris
