#include "models/layers/common.h"

#include "models/rope.h"

namespace cypris {

Tensor& ForwardScratch::get(const std::string& name, int64_t width) {
  auto key = std::make_pair(name, width);
  auto it = buffers_.find(key);
  if (it == buffers_.end()) it = buffers_.emplace(key, backend_.empty(backend_.activation_dtype(), {tokens_, width})).first;
  return it->second.view;
}

RotaryCache::RotaryCache(Backend& b, const ModelConfig& cfg) {
  std::vector<float> cs = build_rope_cos_sin(cfg, cfg.max_model_len);
  cos_sin_ = b.upload(cs.data(), DType::F32, {cfg.max_model_len, cfg.rotary_dim()});
}

}  // namespace cypris
