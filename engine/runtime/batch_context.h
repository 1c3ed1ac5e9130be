// One step's flattened batch, as the model sees it (vLLM's attention metadata): the new tokens of
// every scheduled sequence back to back, where to write their K/V in the paged cache, and the
// block tables attention reads earlier context through. Prefill chunks and decodes mix freely.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cypris {

struct BatchContext {
  std::vector<int32_t> token_ids;        // [num_tokens]
  std::vector<int32_t> positions;        // [num_tokens]
  std::vector<int64_t> slot_mapping;     // [num_tokens]: block_id * block_size + offset; < 0 = skip
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1]: sequence s owns tokens [qsl[s], qsl[s+1])
  std::vector<int32_t> seq_lens;         // [num_seqs]: context length including the new tokens
  std::vector<int32_t> block_tables;     // [num_seqs, max_blocks_per_seq] row-major physical block ids
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> logits_indices;  // token rows to compute logits for (usually each sequence's last)

  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }

  // Checks sizes and ranges against the cache geometry; throws Error saying which field is wrong.
  void validate(int64_t num_blocks, int block_size) const;
};

// A batch of one sequence whose tokens [start, start + new_tokens.size()) are new, stored in blocks
// 0, 1, 2, ... of the cache (the trivial assignment `cypris generate` and the benchmark use).
// Logits are computed for the last token.
BatchContext make_single_sequence_batch(std::span<const int32_t> new_tokens, int32_t start, int block_size);

}  // namespace cypris
