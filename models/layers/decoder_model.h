// What every decoder-only model shares: its config, backend, build options and tensor-parallel
// layout, the Model accessors derived from them, the token embedding and LM head, and the forward
// pass's skeleton (activation buffers, embedding, the layer loop, final norm, LM head on the logits
// rows, debug dumps). A family (Llama-style, Gemma, Cohere) supplies only its layers and norms
// through the hooks below.
#pragma once

#include <string>
#include <vector>

#include "engine/backend/layer_weight_hooks.h"
#include "engine/common/error.h"
#include "models/layers/common.h"
#include "models/layers/vocab_parallel.h"
#include "models/layers/weight_loader.h"
#include "models/model.h"

namespace cypris {

// The residual stream between two decoder layers: `residual` [T, hidden] and `hidden` [T, hidden],
// the branch output of the layer before that the next layer's fused add-norm adds into the
// residual (Llama, Gemma). A family whose layers add their branches themselves (Cohere) leaves
// `hidden` as scratch. Both in the backend's activation dtype.
struct LayerStream {
  DeviceTensor residual;
  DeviceTensor hidden;
};

class DecoderModel : public Model {
 public:
  const ModelConfig& config() const override { return cfg_; }
  int num_layers() const override { return end_layer_ - first_layer_; }
  int num_kv_heads() const override { return layout_.kv_heads; }
  int head_dim() const override { return layout_.head_dim; }

  // embed -> layers -> final norm -> LM head on in.logits_indices, dumping "embed",
  // "layers.<i>.*", "final_norm" and "logits".
  DeviceTensor forward(const ForwardInputs& in, std::vector<KvCacheLayer>& kv) final;

 protected:
  // Checks the stage's layer range (ModelBuildOptions::first_layer / last_layer).
  DecoderModel(const ModelConfig& cfg, Backend& backend, const ModelBuildOptions& opt);

  // The decoder layers this model builds and runs: [first_layer(), end_layer()) of the whole model.
  int first_layer() const { return first_layer_; }
  int end_layer() const { return end_layer_; }
  bool first_stage() const { return first_layer_ == 0; }
  bool last_stage() const { return end_layer_ == cfg_.num_hidden_layers; }

  // Constructor pieces: the embedding table `name` (read by the first stage, and by the last when
  // the LM head is tied to it), and the LM head of the last stage (tied: the embedding's rows,
  // else lm_head.weight). A family loads its final norm only when last_stage().
  void load_embedding(const WeightLoader& w, const std::string& name) {
    if (first_stage() || (last_stage() && cfg_.tie_word_embeddings)) embed_ = VocabParallelEmbedding(w, name);
  }
  void load_lm_head(const WeightLoader& w, bool tied) {
    if (last_stage()) lm_head_ = LmHead(w, tied ? &embed_ : nullptr);
  }
  // A family's constructor calls this before loading decoder layer i's weights and with -1 after
  // the last layer, so a backend that streams offloaded layers (--cpu-offload-gb,
  // layer_weight_hooks.h) knows whose weights it is given.
  void weights_of_layer(int i) {
    if (hooks_) hooks_->weights_of_layer(i);
  }

  // The family's pieces of forward().
  // After the embedding lookup into s.residual (Gemma scales it by sqrt(hidden)).
  virtual void scale_embedding(Tensor& /*residual*/) {}
  // Decoder layer i (of the whole model, in [first_layer(), end_layer())) on the stream; `kv` is its
  // cache layer.
  virtual void layer_forward(int i, LayerStream& s, const ForwardInputs& in, KvCacheLayer& kv, ForwardScratch& scratch,
                             const Dumper& d) = 0;
  // The final norm of the stream into s.hidden (the LM head's input).
  virtual void final_norm(LayerStream& s, ForwardScratch& scratch) = 0;
  // On the logits [R, vocab] (soft-capping, logit scale).
  virtual void finish_logits(Tensor& /*logits*/) {}

  ModelConfig cfg_;
  Backend& backend_;
  ModelBuildOptions opt_;
  TpLayout layout_;
  VocabParallelEmbedding embed_;
  LmHead lm_head_;

 private:
  void check_cache(const std::vector<KvCacheLayer>& kv) const {
    CYPRIS_CHECK(kv.size() == static_cast<size_t>(num_layers()), "forward: {} cache layers for {} layers", kv.size(),
                 num_layers());
  }

  int first_layer_ = 0;
  int end_layer_ = 0;
  LayerWeightHooks* hooks_ = nullptr;  // the backend's, when it has them
};

}  // namespace cypris
