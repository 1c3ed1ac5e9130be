// Small shared pieces of the decoder layers: RMSNorm with its weight, the rotary cos/sin cache,
// and the per-forward scratch buffers the layers of one step share.
#pragma once

#include <map>
#include <string>

#include "models/layers/weight_loader.h"

namespace cypris {

// Activation buffers of one forward pass, by name and width: each layer asks for "qkv" etc. and
// gets the same memory as the previous layer (allocated once per forward and width).
class ForwardScratch {
 public:
  ForwardScratch(Backend& b, int64_t num_tokens) : backend_(b), tokens_(num_tokens) {}
  // [num_tokens, width] of the backend's activation dtype.
  Tensor& get(const std::string& name, int64_t width);
  int64_t num_tokens() const { return tokens_; }

 private:
  Backend& backend_;
  int64_t tokens_;
  std::map<std::pair<std::string, int64_t>, DeviceTensor> buffers_;
};

class RmsNorm {
 public:
  RmsNorm() = default;
  // offset is added to the stored weight (Gemma stores w and multiplies by 1 + w).
  RmsNorm(const WeightLoader& w, const std::string& name, int64_t width, float eps, float offset = 0.0f)
      : weight_(w.load_f32(name, {width}, offset)), eps_(eps) {}
  void forward(Backend& b, const Tensor& x, Tensor& out) const { b.rms_norm(x, weight_.view, eps_, out); }
  // residual += x; x = norm(residual).
  void add_forward(Backend& b, Tensor& x, Tensor& residual) const {
    b.fused_add_rms_norm(x, residual, weight_.view, eps_);
  }
  const Tensor& weight() const { return weight_.view; }
  float eps() const { return eps_; }

 private:
  DeviceTensor weight_;  // F32 [width]
  float eps_ = 1e-6f;
};

// The cos/sin table of one RoPE configuration (rope_theta, rope_scaling, partial rotary factor of
// `cfg`), for positions [0, cfg.max_model_len).
class RotaryCache {
 public:
  RotaryCache() = default;
  RotaryCache(Backend& b, const ModelConfig& cfg);
  // Neox rotary in place on q [T, Hq*D] and k [T, Hkv*D], then k and v stored in the layer's
  // cache (one fused op on CUDA).
  void apply_and_cache(Backend& b, Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, int head_dim,
                       const AttentionMetadata& meta, Tensor& k_cache, Tensor& v_cache,
                       const KvCacheScales& kv_scales) const {
    b.rotary_and_write_kv_cache(q, k, v, positions, cos_sin_.view, head_dim, meta, k_cache, v_cache, kv_scales);
  }

 private:
  DeviceTensor cos_sin_;  // F32 [max_model_len, rotary_dim]
};

}  // namespace cypris
