// build_batch_layout: SchedulerOutput -> flat arrays for the model runner.
#include "engine/scheduler/batch_layout.h"

#include <algorithm>
#include <stdexcept>

namespace cypris {

BatchLayout build_batch_layout(const SchedulerOutput& output) {
  BatchLayout b;
  b.block_size = output.block_size;
  const int64_t bs = output.block_size;
  b.token_ids.reserve(size_t(output.total_num_scheduled_tokens));
  b.positions.reserve(size_t(output.total_num_scheduled_tokens));
  b.slot_mapping.reserve(size_t(output.total_num_scheduled_tokens));
  b.query_start_loc.push_back(0);
  for (const auto& s : output.scheduled)
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, int32_t(s.block_ids.size()));
  b.block_tables.assign(output.scheduled.size() * size_t(b.max_blocks_per_seq), -1);
  for (size_t r = 0; r < output.scheduled.size(); ++r) {
    const auto& s = output.scheduled[r];
    auto tokens = s.request->all_token_ids();
    const int32_t end = s.num_computed_tokens + s.num_scheduled_tokens;
    if (end > int32_t(tokens.size()) || int64_t(s.block_ids.size()) * bs < end)
      throw std::logic_error("build_batch_layout: scheduled tokens beyond the request's tokens or blocks");
    for (int32_t pos = s.num_computed_tokens; pos < end; ++pos) {
      b.token_ids.push_back(tokens[size_t(pos)]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(int64_t(s.block_ids[size_t(pos / bs)]) * bs + pos % bs);
    }
    b.query_start_loc.push_back(int32_t(b.token_ids.size()));
    b.context_lens.push_back(s.num_computed_tokens);
    b.seq_lens.push_back(end);
    std::copy(s.block_ids.begin(), s.block_ids.end(), b.block_tables.begin() + ptrdiff_t(r) * b.max_blocks_per_seq);
    b.max_query_len = std::max(b.max_query_len, s.num_scheduled_tokens);
    b.max_seq_len = std::max(b.max_seq_len, end);
    if (s.samples) {
      b.logits_indices.push_back(int32_t(b.token_ids.size()) - 1);
      b.sampled_requests.push_back(int32_t(r));
    }
  }
  return b;
}

}  // namespace cypris
