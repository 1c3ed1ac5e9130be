// Pipeline micro-batches: one step's batch cut into consecutive groups of sequences, so that
// pipeline stage s can run micro-batch k while stage s + 1 runs micro-batch k - 1 (the model
// runner's pipeline ticks). Each part is a BatchContext of its own (tokens, slots, block tables
// and logits rows re-based), and remembers which of the step's logits rows it computes. Pure logic.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/scheduler/batch_context.h"

namespace cypris {

struct MicroBatch {
  BatchContext batch;  // sequences [first_seq, first_seq + batch.num_seqs()) of the step
  int first_seq = 0;
  std::vector<int32_t> rows;  // [batch.logits_indices.size()]: each row's index in the step's logits
};

// Up to `parts` micro-batches (at most one per sequence, at least one), cut between sequences so
// that their token counts are as even as the sequences allow. A valid batch (validate()) in, the
// parts' logits rows together are each of the step's rows exactly once.
std::vector<MicroBatch> split_micro_batches(const BatchContext& b, int parts);

}  // namespace cypris
