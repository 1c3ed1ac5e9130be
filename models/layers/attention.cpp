#include "models/layers/attention.h"

#include <cmath>
#include <vector>

#include "engine/common/error.h"

namespace cypris {

AttentionBlock::AttentionBlock(const WeightLoader& w, const TpLayout& layout, const AttentionSpec& spec)
    : layout_(layout), sliding_window_(spec.sliding_window) {
  const ModelConfig& cfg = w.config();
  const int64_t h = cfg.hidden_size;
  const int64_t d = layout.head_dim;
  const int64_t qd = int64_t{cfg.num_attention_heads} * d;
  const int64_t kvd = int64_t{cfg.num_key_value_heads} * d;
  const std::string& p = spec.prefix;
  std::vector<LinearPart> parts;
  if (spec.fused_qkv.empty()) {
    parts = {{p + spec.q, qd, layout.rows}, {p + spec.k, kvd, layout.kv_rows}, {p + spec.v, kvd, layout.kv_rows}};
  } else {
    // Row ranges of the one fused tensor, each split like the separate tensors would be.
    const std::string f = p + spec.fused_qkv;
    const int64_t all = qd + 2 * kvd;
    parts = {{f, all, layout.rows, 0, qd}, {f, all, layout.kv_rows, qd, kvd}, {f, all, layout.kv_rows, qd + kvd, kvd}};
  }
  if (spec.interleaved_rope) {
    CYPRIS_CHECK(w.config().rotary_dim() == d, "{}: interleaved rotary over part of a head is not supported",
                 w.config().source);
    qkv_ = ColumnParallelLinear::interleaved_to_neox(w, parts, h, spec.qkv_bias, layout.q_width() + layout.kv_width(),
                                                     static_cast<int>(d));
  } else {
    qkv_ = ColumnParallelLinear(w, parts, h, spec.qkv_bias);
  }
  rope_ = spec.rope;
  o_ = RowParallelLinear(w, p + spec.o, h, qd, spec.o_bias);
  if (spec.qk_layer_norm) {
    // This rank's heads' weight rows, reordered within each head like the q/k rows when the
    // checkpoint's rotary is interleaved (the mean and variance do not depend on the order).
    auto load = [&](const std::string& name, int64_t heads, const ShardSpec& shard) {
      HostTensor t = w.load_rows_f32_host({p + name, heads, shard}, d);
      if (spec.interleaved_rope) {
        // The [heads, d] values as heads * d one-value rows: the q/k rows' permutation per head.
        const std::vector<int64_t> shape = t.shape;
        t.shape = {shape[0] * d};
        deinterleave_rows(t, t.shape[0], static_cast<int>(d));
        t.shape = shape;
      }
      return w.backend().upload_weight(std::move(t));
    };
    q_ln_ = load(spec.q_norm, cfg.num_attention_heads, layout.rows);
    k_ln_ = load(spec.k_norm, cfg.num_key_value_heads, layout.kv_rows);
    qk_ln_eps_ = spec.qk_norm_eps;
  } else if (!spec.q_norm.empty()) {
    qk_norm_ = true;
    q_norm_ = RmsNorm(w, p + spec.q_norm, d, spec.qk_norm_eps, spec.qk_norm_offset);
    k_norm_ = RmsNorm(w, p + spec.k_norm, d, spec.qk_norm_eps, spec.qk_norm_offset);
  }
  softcap_ = spec.softcap;
  scale_ = spec.scale > 0 ? spec.scale : 1.0f / std::sqrt(static_cast<float>(d));
}

void AttentionBlock::forward(Backend& b, const Tensor& x, const ForwardInputs& in, KvCacheLayer& kv,
                             const RotaryCache& rope, ForwardScratch& scratch, Tensor& out, const Dumper& dump,
                             bool reduce) const {
  const int64_t q_width = layout_.q_width();
  const int64_t kv_width = layout_.kv_width();
  Tensor& qkv = scratch.get("qkv", q_width + 2 * kv_width);
  Tensor& attn = scratch.get("attn", q_width);  // [T, Hq * D]
  qkv_.forward(b, x, qkv);
  Tensor q = column_slice(qkv, 0, q_width);
  Tensor k = column_slice(qkv, q_width, kv_width);
  Tensor v = column_slice(qkv, q_width + kv_width, kv_width);
  dump("q", q);
  dump("k", k);
  dump("v", v);
  if (qk_norm_) {
    b.rms_norm_heads(q, q_norm_.weight(), q_norm_.eps());
    b.rms_norm_heads(k, k_norm_.weight(), k_norm_.eps());
    dump("q_norm", q);
    dump("k_norm", k);
  } else if (q_ln_.view.data) {
    b.layer_norm_heads(q, q_ln_.view, qk_ln_eps_);
    b.layer_norm_heads(k, k_ln_.view, qk_ln_eps_);
    dump("q_norm", q);
    dump("k_norm", k);
  }
  if (rope_) {
    rope.apply_and_cache(b, q, k, v, in.positions, layout_.head_dim, in.attn, kv.k.view, kv.v.view, kv.scales);
    dump("q_rot", q);
    dump("k_rot", k);
  } else {
    b.write_kv_cache(k, v, in.attn, kv.k.view, kv.v.view, kv.scales);
  }
  b.paged_attention(q, kv.k.view, kv.v.view, in.attn, scale_, sliding_window_, attn, kv.scales, softcap_);
  dump("attn", attn);
  o_.forward(b, attn, out, reduce);
  if (reduce) dump("o_proj", out);
}

}  // namespace cypris
