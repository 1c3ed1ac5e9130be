// What every decoder-only model shares: its config, backend, build options and tensor-parallel
// layout, the Model accessors derived from them, and the check that a forward pass got one KV-cache
// layer per decoder layer. Llama-style, Gemma and Cohere models derive from it.
#pragma once

#include <vector>

#include "engine/common/error.h"
#include "models/layers/lora.h"
#include "models/layers/weight_loader.h"
#include "models/model.h"

namespace cypris {

class DecoderModel : public Model {
 public:
  const ModelConfig& config() const override { return cfg_; }
  int num_layers() const override { return cfg_.num_hidden_layers; }
  int num_kv_heads() const override { return layout_.kv_heads; }
  int head_dim() const override { return layout_.head_dim; }

 protected:
  DecoderModel(const ModelConfig& cfg, Backend& backend, const ModelBuildOptions& opt)
      : cfg_(cfg), backend_(backend), opt_(opt), layout_(make_tp_layout(cfg, opt)) {}

  // Hands the batch's per-row LoRA slots to the layers' LoRA sites (--enable-lora).
  void bind_lora(const ForwardInputs& in) const {
    if (opt_.lora) opt_.lora->bind(in.lora_slots);
  }

  void check_cache(const std::vector<KvCacheLayer>& kv) const {
    CYPRIS_CHECK(kv.size() == static_cast<size_t>(cfg_.num_hidden_layers), "forward: {} cache layers for {} layers",
                 kv.size(), cfg_.num_hidden_layers);
  }

  ModelConfig cfg_;
  Backend& backend_;
  ModelBuildOptions opt_;
  TpLayout layout_;
};

}  // namespace cypris
