// The vocabulary-parallel ends of a decoder: the token embedding (each rank holds a slice of the
// rows, the all-reduce adds up the one real row) and the LM head (each rank computes its vocab
// columns; the logits are gathered to full width on every rank). The head may share the
// embedding's storage (tie_word_embeddings).
#pragma once

#include "models/layers/weight_loader.h"

namespace cypris {

// Slices of ceil(V / tp) rows; when tp does not divide V the last ranks hold fewer real rows.
struct VocabShard {
  int64_t per_rank = 0;  // ceil(vocab / tp)
  int64_t start = 0;     // first row of this rank
  int64_t count = 0;     // its real rows
  static VocabShard of(int64_t vocab, int rank, int tp);
};

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding() = default;
  VocabParallelEmbedding(const WeightLoader& w, const std::string& name);
  // out F32 [T, hidden] = table[ids]; ids I32 [T] on the device.
  void forward(Backend& b, const Tensor& ids, Tensor& out) const;
  // The table: [vocab, hidden] at tp 1; [per_rank + 1, hidden] at tp > 1 (zero rows pad it).
  const DeviceTensor& table() const { return table_; }
  const VocabShard& shard() const { return shard_; }

 private:
  DeviceTensor table_;
  VocabShard shard_;
  int64_t vocab_ = 0;
  const ModelBuildOptions* opt_ = nullptr;
};

class LmHead {
 public:
  LmHead() = default;
  // Tied: shares the embedding's rows. Else loads `name` ("lm_head.weight"), Error when missing.
  LmHead(const WeightLoader& w, const VocabParallelEmbedding* tied, const std::string& name = "lm_head.weight");
  // logits F32 [R, vocab] of rows [R, hidden], full width on every rank.
  DeviceTensor forward(Backend& b, const Tensor& rows) const;
  // The logits of the selected rows (I32 [R] on the device) of hidden [T, hidden].
  DeviceTensor forward_selected(Backend& b, const Tensor& hidden, const Tensor& indices) const;

 private:
  DeviceTensor weight_;  // [per_rank, hidden]
  VocabShard shard_;
  int64_t vocab_ = 0;
  const ModelBuildOptions* opt_ = nullptr;
};

}  // namespace cypris
