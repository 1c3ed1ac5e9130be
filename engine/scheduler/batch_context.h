// One step's flattened batch, as the model sees it (vLLM's attention metadata): the new tokens of
// every scheduled sequence back to back, where to write their K/V in the paged cache, the block
// tables attention reads earlier context through, and the rows to compute logits for. Prefill
// chunks and decodes mix freely. The scheduler builds it (SchedulerOutput::batch, from
// build_batch_context) and the model runner consumes it as is: this is the one batch
// representation between them, defined here, the lowest layer that needs it. Pure data, no device.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cypris {

struct SchedulerOutput;

struct BatchContext {
  std::vector<int32_t> token_ids;        // [num_tokens]
  std::vector<int32_t> positions;        // [num_tokens]
  std::vector<int64_t> slot_mapping;     // [num_tokens]: block_id * block_size + offset; < 0 = skip
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1]: sequence s owns tokens [qsl[s], qsl[s+1])
  std::vector<int32_t> seq_lens;         // [num_seqs]: context length including the new tokens
  std::vector<int32_t> block_tables;     // [num_seqs, max_blocks_per_seq] row-major physical block ids (-1: padding)
  int32_t max_blocks_per_seq = 0;
  // Upper bounds a device backend sizes its launches by without reading device memory back: the
  // longest new-token run and the longest context (0 = unknown; the builders fill them, validate()
  // refuses understated ones).
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
  std::vector<int32_t> logits_indices;  // token rows to compute logits for (usually each sequence's last)
  // [num sampled] which sequence (index into SchedulerOutput::scheduled) each sampled row is, for the
  // first sampled_seqs.size() entries of logits_indices (the engine reorders both together and
  // appends its prompt-logprob rows after them). A sequence with drafted tokens (speculative
  // decoding) has one row per verified position, consecutive, in position order. Empty for
  // batches not built by the scheduler.
  std::vector<int32_t> sampled_seqs;
  // [num_tokens]: the LoRA adapter slot of each token's request (-1: the base model). Empty when
  // no scheduled request uses an adapter.
  std::vector<int32_t> lora_slots;

  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }

  // Checks sizes and ranges against the cache geometry; throws Error saying which field is wrong.
  void validate(int64_t num_blocks, int block_size) const;
};

// The scheduler's step flattened: the scheduled tokens of each request in order, their slots in its
// blocks, block tables padded with -1, the maxima, and a logits row for each request whose step
// reaches its last known token. Throws std::logic_error when a request's scheduled tokens go past
// its tokens or its blocks (a scheduler bug, not bad input).
BatchContext build_batch_context(const SchedulerOutput& output);

// A batch of one sequence whose tokens [start, start + new_tokens.size()) are new, stored in blocks
// 0, 1, 2, ... of the cache (the trivial assignment `cypris generate` and the benchmark use).
// Logits are computed for the last token.
BatchContext make_single_sequence_batch(std::span<const int32_t> new_tokens, int32_t start, int block_size);

}  // namespace cypris
