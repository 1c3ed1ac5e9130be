#include "models/layers/vocab_parallel.h"

#include <algorithm>

#include "engine/common/error.h"
#include "engine/backend/communicator.h"
#include "models/layers/linear.h"

namespace cypris {

VocabShard VocabShard::of(int64_t vocab, int rank, int tp) {
  VocabShard s;
  s.per_rank = (vocab + tp - 1) / tp;
  s.start = std::min<int64_t>(vocab, s.per_rank * rank);
  s.count = std::min<int64_t>(vocab - s.start, s.per_rank);
  return s;
}

VocabParallelEmbedding::VocabParallelEmbedding(const WeightLoader& w, const std::string& name) : opt_(&w.options()) {
  const ModelConfig& cfg = w.config();
  const auto& par = w.options().parallel;
  vocab_ = cfg.vocab_size;
  shard_ = VocabShard::of(vocab_, par.rank, par.world_size);
  const DType wd = w.options().weight_dtype;
  if (par.world_size == 1) {
    table_ = w.load_replicated(name, {vocab_, cfg.hidden_size}, wd);
  } else {
    // One zero row past the slice: every id of another rank maps to it.
    table_ = w.backend().upload_weight(w.load_vocab_rows(name, shard_.start, shard_.count, shard_.per_rank + 1, wd));
  }
}

void VocabParallelEmbedding::forward(Backend& b, const Tensor& ids, Tensor& out) const {
  if (opt_->parallel.world_size == 1) {
    b.embedding(ids, table_.view, out);
    return;
  }
  std::vector<int32_t> local(static_cast<size_t>(ids.numel()));
  b.download(ids, local.data());
  for (int32_t& id : local) {
    CYPRIS_CHECK(id >= 0 && id < vocab_, "token id {} is outside the vocabulary of {}", id, vocab_);
    id = id >= shard_.start && id < shard_.start + shard_.count ? static_cast<int32_t>(id - shard_.start)
                                                                : static_cast<int32_t>(shard_.per_rank);
  }
  DeviceTensor local_ids = b.upload(local.data(), DType::I32, {ids.numel()});
  b.embedding(local_ids.view, table_.view, out);
  tp_all_reduce(*opt_, out);
}

LmHead::LmHead(const WeightLoader& w, const VocabParallelEmbedding* tied, const std::string& name)
    : opt_(&w.options()) {
  const ModelConfig& cfg = w.config();
  const auto& par = w.options().parallel;
  vocab_ = cfg.vocab_size;
  shard_ = VocabShard::of(vocab_, par.rank, par.world_size);
  if (tied) {
    weight_ = tied->table();  // shares the storage; at tp > 1 without the last zero row
    weight_.view.shape[0] = shard_.per_rank;
    return;
  }
  CYPRIS_CHECK(w.contains(name), "{}: tensor '{}' not found and tie_word_embeddings is false in {}",
               w.source().describe(), name, cfg.source);
  const std::string resolved = w.resolve(name);
  if (par.world_size == 1) {
    weight_ = w.load_linear({{name, vocab_, ShardSpec::replicated()}}, cfg.hidden_size);
  } else {
    weight_ = w.backend().upload_weight(
        w.load_vocab_rows(name, shard_.start, shard_.count, shard_.per_rank, w.linear_dtype(resolved)));
  }
}

// Each rank computes its vocab columns, the all-gather stacks them as [rank][row][column] and a
// row gather puts them in [row][rank][column] = [row][vocab] order. When tp does not divide the
// vocabulary the slices are uneven: each rank writes its columns into zeroed full-width logits and
// an all-reduce (one real value per element) joins them.
DeviceTensor LmHead::forward(Backend& b, const Tensor& rows) const {
  const int64_t r = rows.shape[0];
  const int tp = opt_->parallel.world_size;
  if (tp > 1 && vocab_ % tp != 0) {
    DeviceTensor logits = b.zeros(DType::F32, {r, vocab_});
    if (r == 0) return logits;
    if (shard_.count > 0) {
      Tensor w = weight_.view;
      w.shape[0] = shard_.count;
      Tensor out = column_slice(logits.view, shard_.start, shard_.count);
      b.linear(rows, w, nullptr, out);
    }
    tp_all_reduce(*opt_, logits.view);
    return logits;
  }
  DeviceTensor logits = b.empty(DType::F32, {r, vocab_});
  if (tp == 1) {
    b.linear(rows, weight_.view, nullptr, logits.view);
    return logits;
  }
  if (r == 0) return logits;
  const int64_t per = shard_.per_rank;
  DeviceTensor local = b.empty(DType::F32, {r, per});
  b.linear(rows, weight_.view, nullptr, local.view);
  DeviceTensor gathered = b.empty(DType::F32, {tp * r, per});
  opt_->comm->all_gather(local.view.as<float>(), gathered.view.as<float>(), r * per);
  std::vector<int32_t> order(static_cast<size_t>(r * tp));
  for (int64_t i = 0; i < r; ++i) {
    for (int k = 0; k < tp; ++k) order[i * tp + k] = static_cast<int32_t>(k * r + i);
  }
  DeviceTensor order_dev = b.upload(order.data(), DType::I32, {r * tp});
  Tensor out(logits.view.data, DType::F32, {r * tp, per}, logits.view.device);
  out.device_index = logits.view.device_index;
  b.gather_rows(gathered.view, order_dev.view, out);
  return logits;
}

DeviceTensor LmHead::forward_selected(Backend& b, const Tensor& hidden, const Tensor& indices) const {
  DeviceTensor rows = b.empty(hidden.dtype, {indices.shape[0], hidden.shape[1]});
  b.gather_rows(hidden, indices, rows.view);
  return forward(b, rows.view);
}

}  // namespace cypris
