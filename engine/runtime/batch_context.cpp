#include "engine/runtime/batch_context.h"

#include "engine/common/error.h"

namespace cypris {

void BatchContext::validate(int64_t num_blocks, int block_size) const {
  const int64_t n = num_tokens();
  const int s = num_seqs();
  CYPRIS_CHECK(positions.size() == static_cast<size_t>(n), "batch: positions has {} entries, token_ids {}",
               positions.size(), n);
  CYPRIS_CHECK(slot_mapping.size() == static_cast<size_t>(n), "batch: slot_mapping has {} entries, token_ids {}",
               slot_mapping.size(), n);
  CYPRIS_CHECK(query_start_loc.size() == static_cast<size_t>(s) + 1,
               "batch: query_start_loc needs num_seqs + 1 = {} entries, has {}", s + 1, query_start_loc.size());
  CYPRIS_CHECK(query_start_loc.front() == 0 && query_start_loc.back() == n,
               "batch: query_start_loc must run from 0 to num_tokens ({})", n);
  CYPRIS_CHECK(max_blocks_per_seq >= 0 && block_tables.size() == static_cast<size_t>(s) * max_blocks_per_seq,
               "batch: block_tables has {} entries, expected num_seqs * max_blocks_per_seq = {}", block_tables.size(),
               static_cast<int64_t>(s) * max_blocks_per_seq);
  for (int64_t slot : slot_mapping) {
    CYPRIS_CHECK(slot < num_blocks * block_size, "batch: slot {} is outside the KV cache ({} slots)", slot,
                 num_blocks * block_size);
  }
  for (int32_t id : block_tables) {
    CYPRIS_CHECK(id >= 0 && id < num_blocks, "batch: block table names block {}, the cache has {}", id, num_blocks);
  }
  for (int32_t i : logits_indices) {
    CYPRIS_CHECK(i >= 0 && i < n, "batch: logits index {} is outside [0, {})", i, n);
  }
}

BatchContext make_single_sequence_batch(std::span<const int32_t> new_tokens, int32_t start, int block_size) {
  BatchContext b;
  const int32_t n = static_cast<int32_t>(new_tokens.size());
  b.token_ids.assign(new_tokens.begin(), new_tokens.end());
  for (int32_t i = 0; i < n; ++i) {
    b.positions.push_back(start + i);
    b.slot_mapping.push_back(start + i);  // block k holds positions [k*bs, (k+1)*bs): slot == position
  }
  b.query_start_loc = {0, n};
  b.seq_lens = {start + n};
  b.max_blocks_per_seq = (start + n + block_size - 1) / block_size;
  for (int32_t k = 0; k < b.max_blocks_per_seq; ++k) b.block_tables.push_back(k);
  if (n > 0) b.logits_indices = {n - 1};
  return b;
}

}  // namespace cypris
