#include "models/layers/decoder_model.h"

#include "models/layers/lora.h"

namespace cypris {

DeviceTensor DecoderModel::forward(const ForwardInputs& in, std::vector<KvCacheLayer>& kv) {
  check_cache(kv);
  // The batch's per-row LoRA slots for the layers' LoRA sites (--enable-lora).
  if (opt_.lora) opt_.lora->bind(in.lora_slots);
  const int64_t t = in.token_ids.shape[0];
  const int64_t h = cfg_.hidden_size;
  ForwardScratch scratch(backend_, t);
  LayerStream s;
  s.residual = backend_.empty(backend_.activation_dtype(), {t, h});  // [T, hidden]
  s.hidden = backend_.empty(backend_.activation_dtype(), {t, h});    // [T, hidden]

  embed_.forward(backend_, in.token_ids, s.residual.view);
  scale_embedding(s.residual.view);
  dump("embed", s.residual.view);
  for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
    layer_forward(i, s, in, kv[static_cast<size_t>(i)], scratch, dumper("layers." + std::to_string(i) + "."));
  }
  final_norm(s, scratch);
  dump("final_norm", s.hidden.view);
  DeviceTensor logits = lm_head_.forward_selected(backend_, s.hidden.view, in.logits_indices);
  finish_logits(logits.view);
  dump("logits", logits.view);
  return logits;
}

}  // namespace cypris
