#include "models/layers/decoder_model.h"

#include "models/layers/lora.h"

namespace cypris {

DecoderModel::DecoderModel(const ModelConfig& cfg, Backend& backend, const ModelBuildOptions& opt)
    : cfg_(cfg), backend_(backend), opt_(opt), layout_(make_tp_layout(cfg, opt)), hooks_(layer_weight_hooks(backend)) {
  const int n = cfg.num_hidden_layers;
  first_layer_ = opt.first_layer;
  end_layer_ = opt.last_layer < 0 ? n : opt.last_layer;
  CYPRIS_CHECK(first_layer_ >= 0 && first_layer_ < end_layer_ && end_layer_ <= n,
               "pipeline stage layers [{}, {}) are not a non-empty range of the model's {} layers ({})", first_layer_,
               end_layer_, n, cfg.source);
}

DeviceTensor DecoderModel::forward(const ForwardInputs& in, std::vector<KvCacheLayer>& kv) {
  check_cache(kv);
  // The batch's per-row LoRA slots for the layers' LoRA sites (--enable-lora).
  if (opt_.lora) opt_.lora->bind(in.lora_slots);
  const int64_t t = in.token_ids.shape[0];
  const int64_t h = cfg_.hidden_size;
  ForwardScratch scratch(backend_, t);
  LayerStream s;
  if (first_stage()) {
    s.residual = backend_.empty(backend_.activation_dtype(), {t, h});  // [T, hidden]
    s.hidden = backend_.empty(backend_.activation_dtype(), {t, h});    // [T, hidden]
    embed_.forward(backend_, in.token_ids, s.residual.view);
    scale_embedding(s.residual.view);
    dump("embed", s.residual.view);
  } else {
    // The previous stage's stream, already on this backend in its activation dtype.
    CYPRIS_CHECK(in.stage_in != nullptr, "forward: the stage of layers [{}, {}) needs the previous stage's output",
                 first_layer_, end_layer_);
    const std::vector<int64_t> shape = {t, h};
    const DType act = backend_.activation_dtype();
    CYPRIS_CHECK(in.stage_in->residual.view.shape == shape && in.stage_in->hidden.view.shape == shape &&
                     in.stage_in->residual.view.dtype == act && in.stage_in->hidden.view.dtype == act,
                 "forward: the stage hand-off must be two [{}, {}] {} tensors", t, h, dtype_name(act));
    s.residual = in.stage_in->residual;
    s.hidden = in.stage_in->hidden;
  }
  if (hooks_) hooks_->begin_layers();
  for (int i = first_layer_; i < end_layer_; ++i) {
    if (hooks_) hooks_->before_layer(i);
    layer_forward(i, s, in, kv[static_cast<size_t>(i - first_layer_)], scratch,
                  dumper("layers." + std::to_string(i) + "."));
  }
  if (!last_stage()) {
    CYPRIS_CHECK(in.stage_out != nullptr, "forward: the stage of layers [{}, {}) needs somewhere to put its output",
                 first_layer_, end_layer_);
    in.stage_out->residual = std::move(s.residual);
    in.stage_out->hidden = std::move(s.hidden);
    return {};
  }
  final_norm(s, scratch);
  dump("final_norm", s.hidden.view);
  DeviceTensor logits = lm_head_.forward_selected(backend_, s.hidden.view, in.logits_indices);
  finish_logits(logits.view);
  dump("logits", logits.view);
  return logits;
}

}  // namespace cypris
