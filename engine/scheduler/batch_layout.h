// BatchLayout: one scheduler step flattened into the arrays a model runner feeds its
// BatchContext (token ids, positions, slot mapping, sequence lengths, block tables, which rows
// to sample). Pure function of SchedulerOutput, so the runner never walks scheduler objects.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/scheduler/scheduler_output.h"

namespace cypris {

struct BatchLayout {
  int32_t block_size = 0;
  std::vector<int32_t> token_ids;        // [num_tokens]
  std::vector<int32_t> positions;        // [num_tokens]
  std::vector<int64_t> slot_mapping;     // [num_tokens] block_id * block_size + offset: where its K/V go
  std::vector<int32_t> query_start_loc;  // [num_reqs + 1] first token row of each request
  std::vector<int32_t> context_lens;     // [num_reqs] tokens already in the cache before the step
  std::vector<int32_t> seq_lens;         // [num_reqs] context + scheduled tokens (attention span)
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> block_tables;      // [num_reqs, max_blocks_per_seq], padded with -1
  std::vector<int32_t> logits_indices;    // [num_sampled] token rows whose logits are sampled
  std::vector<int32_t> sampled_requests;  // [num_sampled] index into SchedulerOutput::scheduled
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
  int32_t num_tokens() const { return int32_t(token_ids.size()); }
  int32_t num_requests() const { return int32_t(seq_lens.size()); }
};

BatchLayout build_batch_layout(const SchedulerOutput& output);

}  // namespace cypris
