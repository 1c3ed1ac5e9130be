#include "models/phi3.h"

#include "models/llama.h"

namespace cypris {

std::unique_ptr<Model> create_phi3_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                         const ModelBuildOptions& options) {
  LlamaVariant v;
  v.fused_qkv = "qkv_proj.weight";          // rows [q | k | v]
  v.fused_gate_up = "gate_up_proj.weight";  // rows [gate | up]
  return create_llama_style_model(cfg, weights, backend, options, v);
}

}  // namespace cypris
