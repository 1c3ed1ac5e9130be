#include "models/llama.h"

#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/runtime/communicator.h"
#include "engine/runtime/tp_workers.h"
#include "models/rope.h"

namespace cypris {
namespace {

struct LlamaLayer {
  DeviceTensor input_norm;  // F32 [hidden]
  DeviceTensor qkv;         // [(Hq / tp + 2 Hkv_rank) * D, hidden]: q, k, v projections stacked
  DeviceTensor qkv_bias;    // F32 or undefined
  DeviceTensor o;           // [hidden, Hq * D / tp]
  DeviceTensor o_bias;
  DeviceTensor post_norm;
  DeviceTensor gate_up;  // [2 * I / tp, hidden]: gate then up
  DeviceTensor gate_up_bias;
  DeviceTensor down;  // [hidden, I / tp]
  DeviceTensor down_bias;
  int sliding_window = 0;
};

class LlamaModel : public Model {
 public:
  LlamaModel(const ModelConfig& cfg, const WeightSource& weights, Backend& backend, const ModelBuildOptions& opt)
      : cfg_(cfg), backend_(backend), opt_(opt) {
    const int tp = opt.parallel.world_size;
    check_tensor_parallel(cfg, tp);
    CYPRIS_CHECK(opt.parallel.rank >= 0 && opt.parallel.rank < tp, "tensor parallel rank {} outside world size {}",
                 opt.parallel.rank, tp);
    CYPRIS_CHECK(tp == 1 || (opt.comm && opt.comm->world_size() == tp && opt.comm->rank() == opt.parallel.rank),
                 "tensor parallel rank {} of {} needs a communicator of the same rank and size", opt.parallel.rank, tp);
    hq_ = cfg.num_attention_heads / tp;
    hkv_ = kv_heads_per_rank(cfg.num_key_value_heads, tp);
    d_ = cfg.head_dim;
    inter_ = cfg.intermediate_size / tp;
    // Vocab slices of ceil(V / tp) rows; when tp does not divide V the last ranks hold fewer real
    // rows (zero rows pad them).
    vocab_rank_ = (cfg.vocab_size + tp - 1) / tp;
    vocab_start_ = std::min<int64_t>(cfg.vocab_size, vocab_rank_ * opt.parallel.rank);
    vocab_count_ = std::min<int64_t>(cfg.vocab_size - vocab_start_, vocab_rank_);
    load(weights);
    std::vector<float> cs = build_rope_cos_sin(cfg, cfg.max_model_len);
    cos_sin_ = backend.upload(cs.data(), DType::F32, {cfg.max_model_len, cfg.rotary_dim()});
  }

  const ModelConfig& config() const override { return cfg_; }
  int num_layers() const override { return cfg_.num_hidden_layers; }
  int num_kv_heads() const override { return hkv_; }
  int head_dim() const override { return d_; }

  DeviceTensor forward(const ForwardInputs& in, std::vector<KvCacheLayer>& kv) override {
    CYPRIS_CHECK(kv.size() == static_cast<size_t>(cfg_.num_hidden_layers), "forward: {} cache layers for {} layers",
                 kv.size(), cfg_.num_hidden_layers);
    const int64_t t = in.token_ids.shape[0];
    const int64_t h = cfg_.hidden_size;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    const int64_t q_width = int64_t{hq_} * d_;
    const int64_t kv_width = int64_t{hkv_} * d_;

    DeviceTensor residual = backend_.empty(DType::F32, {t, h});  // [T, hidden]
    DeviceTensor hidden = backend_.empty(DType::F32, {t, h});    // [T, hidden]
    DeviceTensor qkv = backend_.empty(DType::F32, {t, q_width + 2 * kv_width});
    DeviceTensor attn = backend_.empty(DType::F32, {t, q_width});  // [T, Hq * D]
    DeviceTensor gate_up = backend_.empty(DType::F32, {t, 2 * inter_});
    DeviceTensor act = backend_.empty(DType::F32, {t, inter_});

    embed(in.token_ids, residual.view);
    dump("embed", residual.view);
    for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
      const LlamaLayer& L = layers_[i];
      const std::string p = "layers." + std::to_string(i) + ".";
      if (i == 0) {
        backend_.rms_norm(residual.view, L.input_norm.view, eps, hidden.view);
      } else {
        backend_.fused_add_rms_norm(hidden.view, residual.view, L.input_norm.view, eps);
      }
      dump(p + "input_norm", hidden.view);
      backend_.linear(hidden.view, L.qkv.view, bias(L.qkv_bias), qkv.view);
      Tensor q = column_slice(qkv.view, 0, q_width);
      Tensor k = column_slice(qkv.view, q_width, kv_width);
      Tensor v = column_slice(qkv.view, q_width + kv_width, kv_width);
      dump(p + "q", q);
      dump(p + "k", k);
      dump(p + "v", v);
      backend_.rotary(q, k, in.positions, cos_sin_.view, d_);
      dump(p + "q_rot", q);
      dump(p + "k_rot", k);
      backend_.write_kv_cache(k, v, in.attn, kv[i].k.view, kv[i].v.view, kv[i].scales);
      backend_.paged_attention(q, kv[i].k.view, kv[i].v.view, in.attn, scale, L.sliding_window, attn.view,
                               kv[i].scales);
      dump(p + "attn", attn.view);
      backend_.linear(attn.view, L.o.view, row_parallel_bias(L.o_bias), hidden.view);
      all_reduce(hidden.view);
      dump(p + "o_proj", hidden.view);
      backend_.fused_add_rms_norm(hidden.view, residual.view, L.post_norm.view, eps);
      dump(p + "residual_mid", residual.view);
      dump(p + "post_norm", hidden.view);
      backend_.linear(hidden.view, L.gate_up.view, bias(L.gate_up_bias), gate_up.view);
      backend_.silu_and_mul(gate_up.view, act.view);
      dump(p + "mlp_act", act.view);
      backend_.linear(act.view, L.down.view, row_parallel_bias(L.down_bias), hidden.view);
      all_reduce(hidden.view);
      dump(p + "mlp_out", hidden.view);
    }
    backend_.fused_add_rms_norm(hidden.view, residual.view, final_norm_.view, eps);
    dump("final_norm", hidden.view);
    const int64_t r = in.logits_indices.shape[0];
    DeviceTensor rows = backend_.empty(DType::F32, {r, h});
    backend_.gather_rows(hidden.view, in.logits_indices, rows.view);
    DeviceTensor logits = lm_head(rows.view);
    dump("logits", logits.view);
    return logits;
  }

 private:
  static const Tensor* bias(const DeviceTensor& b) { return b.view.data ? &b.view : nullptr; }
  // A row-parallel layer's bias is added once, by rank 0, before the all-reduce sums the ranks.
  const Tensor* row_parallel_bias(const DeviceTensor& b) const { return opt_.parallel.rank == 0 ? bias(b) : nullptr; }
  int world_size() const { return opt_.parallel.world_size; }

  void all_reduce(Tensor& t) {
    if (world_size() > 1) opt_.comm->all_reduce_sum(t.as<float>(), t.numel());
  }

  // Vocab-parallel embedding: this rank holds rows [vocab_start_, vocab_start_ + vocab_count_),
  // then zero rows up to row vocab_rank_, which every other id maps to; the all-reduce then adds
  // up the one real row.
  void embed(const Tensor& ids, Tensor& out) {
    if (world_size() == 1) {
      backend_.embedding(ids, embed_.view, out);
      return;
    }
    std::vector<int32_t> local(static_cast<size_t>(ids.numel()));
    backend_.download(ids, local.data());
    for (int32_t& id : local) {
      CYPRIS_CHECK(id >= 0 && id < cfg_.vocab_size, "token id {} is outside the vocabulary of {}", id, cfg_.vocab_size);
      id = id >= vocab_start_ && id < vocab_start_ + vocab_count_ ? static_cast<int32_t>(id - vocab_start_)
                                                                  : static_cast<int32_t>(vocab_rank_);
    }
    DeviceTensor local_ids = backend_.upload(local.data(), DType::I32, {ids.numel()});
    backend_.embedding(local_ids.view, embed_.view, out);
    all_reduce(out);
  }

  // Vocab-parallel LM head: each rank computes its vocab columns, the all-gather stacks them as
  // [rank][row][column] and a row gather puts them in [row][rank][column] = [row][vocab] order.
  // When tp does not divide the vocabulary the slices are uneven: each rank writes its columns
  // into zeroed full-width logits and an all-reduce (one real value per element) joins them.
  DeviceTensor lm_head(const Tensor& rows) {
    const int64_t r = rows.shape[0];
    const int tp = world_size();
    if (tp > 1 && cfg_.vocab_size % tp != 0) {
      DeviceTensor logits = backend_.zeros(DType::F32, {r, cfg_.vocab_size});
      if (r == 0) return logits;
      if (vocab_count_ > 0) {
        Tensor w = lm_head_.view;
        w.shape[0] = vocab_count_;
        Tensor out = column_slice(logits.view, vocab_start_, vocab_count_);
        backend_.linear(rows, w, nullptr, out);
      }
      all_reduce(logits.view);
      return logits;
    }
    DeviceTensor logits = backend_.empty(DType::F32, {r, cfg_.vocab_size});
    if (tp == 1) {
      backend_.linear(rows, lm_head_.view, nullptr, logits.view);
      return logits;
    }
    if (r == 0) return logits;
    DeviceTensor local = backend_.empty(DType::F32, {r, vocab_rank_});
    backend_.linear(rows, lm_head_.view, nullptr, local.view);
    DeviceTensor gathered = backend_.empty(DType::F32, {tp * r, vocab_rank_});
    opt_.comm->all_gather(local.view.as<float>(), gathered.view.as<float>(), r * vocab_rank_);
    std::vector<int32_t> order(static_cast<size_t>(r * tp));
    for (int64_t i = 0; i < r; ++i) {
      for (int k = 0; k < tp; ++k) order[i * tp + k] = static_cast<int32_t>(k * r + i);
    }
    DeviceTensor order_dev = backend_.upload(order.data(), DType::I32, {r * tp});
    Tensor out(logits.view.data, DType::F32, {r * tp, vocab_rank_}, logits.view.device);
    out.device_index = logits.view.device_index;
    backend_.gather_rows(gathered.view, order_dev.view, out);
    return logits;
  }

  // HF names carry a "model." prefix; some converted checkpoints drop it.
  std::string resolve(const WeightSource& w, const std::string& name) const {
    if (w.contains(name)) return name;
    const std::string bare = name.rfind("model.", 0) == 0 ? name.substr(6) : name;
    if (w.contains(bare)) return bare;
    CYPRIS_FAIL("{}: tensor '{}' not found in the checkpoint (needed by {})", w.describe(), name,
                cfg_.architectures.front());
  }

  DeviceTensor load_one(const WeightSource& w, const std::string& name, std::vector<int64_t> shape, DType dtype,
                        ShardSpec shard) {
    return backend_.upload_weight(w.load(resolve(w, name), shape, dtype, shard));
  }

  // Loads several tensors split on dim 0 and stacks their slices row-wise into one weight
  // (vLLM's merged column-parallel layers: qkv, gate_up).
  struct Part {
    std::string name;
    int64_t full_rows;
    ShardSpec shard;  // split on dim 0
  };
  DeviceTensor load_stacked(const WeightSource& w, const std::vector<Part>& parts, int64_t cols, DType dtype) {
    int64_t rows = 0;
    for (const auto& [name, full_rows, shard] : parts) rows += full_rows / shard.world_size;
    HostTensor out;
    out.dtype = dtype;
    out.shape = cols > 0 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
    const size_t row_bytes = dtype_nbytes(dtype, cols > 0 ? cols : 1);  // whole blocks for a quantized type
    out.buffer = Buffer(static_cast<size_t>(rows) * row_bytes);
    int64_t offset = 0;
    for (const auto& [name, full_rows, shard] : parts) {
      std::vector<int64_t> full = cols > 0 ? std::vector<int64_t>{full_rows, cols} : std::vector<int64_t>{full_rows};
      w.read_into(resolve(w, name), full, dtype, shard,
                  static_cast<char*>(out.buffer.data()) + static_cast<size_t>(offset) * row_bytes);
      offset += full_rows / shard.world_size;
    }
    return backend_.upload_weight(std::move(out));
  }

  // A linear weight (or a stack of them) stays in its own quantized type (GGUF) when every part has
  // the same one, the backend multiplies it and this rank's rows (row_len elements) are whole
  // blocks; otherwise it is loaded in the model's weight dtype.
  DType linear_dtype(const WeightSource& w, const std::vector<std::string>& names, int64_t row_len) const {
    std::optional<DType> type;
    for (const auto& name : names) {
      const auto t = w.native_dtype(resolve(w, name));
      if (!t || !dtype_is_quantized(*t) || (type && *type != *t)) return opt_.weight_dtype;
      type = t;
    }
    if (!type || !backend_.supports_quantized_weight(*type) || row_len % dtype_block(*type).elems != 0)
      return opt_.weight_dtype;
    return *type;
  }

  void load(const WeightSource& w) {
    const auto& par = opt_.parallel;
    const int64_t h = cfg_.hidden_size;
    const int64_t qd = int64_t{cfg_.num_attention_heads} * d_;
    const int64_t kvd = int64_t{cfg_.num_key_value_heads} * d_;
    const int64_t I = cfg_.intermediate_size;
    const ShardSpec rep = ShardSpec::replicated();
    const ShardSpec rows = ShardSpec::split(0, par.rank, par.world_size);
    const ShardSpec cols = ShardSpec::split(1, par.rank, par.world_size);
    // K and V: this rank's heads, or the one head it shares with others when they are replicated.
    const int kv_total = cfg_.num_key_value_heads;
    const ShardSpec kv_rows = kv_total >= par.world_size
                                  ? rows
                                  : ShardSpec::split(0, first_kv_head(kv_total, par.rank, par.world_size), kv_total);
    load_embedding(w);
    layers_.resize(cfg_.num_hidden_layers);
    for (int i = 0; i < cfg_.num_hidden_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      LlamaLayer& L = layers_[i];
      L.input_norm = load_one(w, p + "input_layernorm.weight", {h}, DType::F32, rep);
      L.post_norm = load_one(w, p + "post_attention_layernorm.weight", {h}, DType::F32, rep);
      const std::string a = p + "self_attn.";
      L.qkv = load_stacked(
          w,
          {{a + "q_proj.weight", qd, rows}, {a + "k_proj.weight", kvd, kv_rows}, {a + "v_proj.weight", kvd, kv_rows}},
          h, linear_dtype(w, {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}, h));
      if (cfg_.qkv_bias) {
        L.qkv_bias = load_stacked(
            w, {{a + "q_proj.bias", qd, rows}, {a + "k_proj.bias", kvd, kv_rows}, {a + "v_proj.bias", kvd, kv_rows}}, 0,
            DType::F32);
      }
      L.o = load_one(w, a + "o_proj.weight", {h, qd}, linear_dtype(w, {a + "o_proj.weight"}, qd / par.world_size), cols);
      if (cfg_.o_bias) L.o_bias = load_one(w, a + "o_proj.bias", {h}, DType::F32, rep);
      const std::string m = p + "mlp.";
      L.gate_up = load_stacked(w, {{m + "gate_proj.weight", I, rows}, {m + "up_proj.weight", I, rows}}, h,
                               linear_dtype(w, {m + "gate_proj.weight", m + "up_proj.weight"}, h));
      L.down = load_one(w, m + "down_proj.weight", {h, I}, linear_dtype(w, {m + "down_proj.weight"}, I / par.world_size), cols);
      if (cfg_.mlp_bias) {
        L.gate_up_bias =
            load_stacked(w, {{m + "gate_proj.bias", I, rows}, {m + "up_proj.bias", I, rows}}, 0, DType::F32);
        L.down_bias = load_one(w, m + "down_proj.bias", {h}, DType::F32, rep);
      }
      L.sliding_window = cfg_.layer_sliding_window[i];
    }
    final_norm_ = load_one(w, "model.norm.weight", {h}, DType::F32, rep);
    if (cfg_.tie_word_embeddings) {
      lm_head_ = embed_;  // shares the storage; at tp > 1 without the last zero row
      lm_head_.view.shape[0] = vocab_rank_;
    } else {
      CYPRIS_CHECK(w.contains("lm_head.weight"),
                   "{}: tensor 'lm_head.weight' not found and tie_word_embeddings is false in {}", w.describe(),
                   cfg_.source);
      lm_head_ = par.world_size == 1 ? load_one(w, "lm_head.weight", {cfg_.vocab_size, h},
                                                linear_dtype(w, {"lm_head.weight"}, h), rows)
                                     : backend_.upload_weight(load_vocab_rows(w, "lm_head.weight", vocab_rank_));
    }
  }

  // This rank's vocabulary rows of an embedding-shaped tensor [vocab, hidden], zero-padded to
  // `alloc_rows` rows. Reads only those rows: in one slice when tp divides the vocabulary, else in
  // chunks of gcd(vocab, vocab_rank_) rows (the slice bounds are multiples of it).
  HostTensor load_vocab_rows(const WeightSource& w, const std::string& hf_name, int64_t alloc_rows) {
    const auto& par = opt_.parallel;
    const DType wd = opt_.weight_dtype;
    const int64_t h = cfg_.hidden_size;
    const int64_t vocab = cfg_.vocab_size;
    const std::string name = resolve(w, hf_name);
    HostTensor t;
    t.dtype = wd;
    t.shape = {alloc_rows, h};
    const size_t row_bytes = static_cast<size_t>(h) * dtype_size(wd);
    t.buffer = Buffer(row_bytes * static_cast<size_t>(alloc_rows));
    std::memset(t.buffer.data(), 0, t.buffer.size());
    if (vocab % par.world_size == 0) {
      w.read_into(name, {vocab, h}, wd, ShardSpec::split(0, par.rank, par.world_size), t.buffer.data());
      return t;
    }
    const int64_t chunk = std::gcd(vocab, vocab_rank_);
    for (int64_t row = vocab_start_; row < vocab_start_ + vocab_count_; row += chunk) {
      w.read_into(name, {vocab, h}, wd,
                  ShardSpec::split(0, static_cast<int>(row / chunk), static_cast<int>(vocab / chunk)),
                  t.buffer.as<char>() + row_bytes * static_cast<size_t>(row - vocab_start_));
    }
    return t;
  }

  // The embedding rows of this rank (all of them at tp 1); at tp > 1 zero rows follow them.
  void load_embedding(const WeightSource& w) {
    const auto& par = opt_.parallel;
    const int64_t h = cfg_.hidden_size;
    const std::string name = resolve(w, "model.embed_tokens.weight");
    if (par.world_size == 1) {
      // A quantized table (GGUF) stays quantized like llama.cpp's, and so does the tied LM head.
      embed_ = backend_.upload_weight(
          w.load(name, {cfg_.vocab_size, h}, linear_dtype(w, {"model.embed_tokens.weight"}, h), ShardSpec::replicated()));
      return;
    }
    embed_ = backend_.upload_weight(load_vocab_rows(w, "model.embed_tokens.weight", vocab_rank_ + 1));
  }

  ModelConfig cfg_;
  Backend& backend_;
  ModelBuildOptions opt_;
  int hq_ = 0, hkv_ = 0, d_ = 0;
  int64_t inter_ = 0;
  int64_t vocab_rank_ = 0;   // vocabulary rows per rank: ceil(vocab / tp)
  int64_t vocab_start_ = 0;  // the first row of this rank
  int64_t vocab_count_ = 0;  // its real rows (fewer than vocab_rank_ on the last ranks when uneven)
  DeviceTensor embed_;       // [vocab, hidden]; at tp > 1 [vocab_rank_ + 1, hidden]
  DeviceTensor lm_head_;     // [vocab_rank_, hidden]
  DeviceTensor final_norm_;
  DeviceTensor cos_sin_;  // F32 [max_model_len, rotary_dim]
  std::vector<LlamaLayer> layers_;
};

}  // namespace

std::unique_ptr<Model> create_llama_model(const ModelConfig& cfg, const WeightSource& weights, Backend& backend,
                                          const ModelBuildOptions& options) {
  return std::make_unique<LlamaModel>(cfg, weights, backend, options);
}

}  // namespace cypris
