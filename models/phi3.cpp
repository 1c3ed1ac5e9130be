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

namespace cypris {

// Phi-3 / Phi-3.5 / Phi-4: the shared config fields (LongRoPE is rope scaling, read for every
// family). GGUF: fused attn_qkv and gate+up (ffn_up) tensors; LongRoPE as the rope_factors_long /
// rope_factors_short tensors.
const ModelFamily& phi3_family() {
  static const ModelFamily f = [] {
    ModelFamily m;
    m.name = "phi3";
    m.gguf = {GgufArchitecture{"phi3", "Phi3ForCausalLM", "phi3"}};
    return m;
  }();
  return f;
}

}  // namespace cypris
