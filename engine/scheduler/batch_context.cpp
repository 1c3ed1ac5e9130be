// BatchContext: validation and the builders (the scheduler's step, a single sequence).
#include "engine/scheduler/batch_context.h"

#include <algorithm>
#include <stdexcept>

#include "engine/common/error.h"
#include "engine/scheduler/scheduler_output.h"

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
  CYPRIS_CHECK(lora_slots.empty() || lora_slots.size() == static_cast<size_t>(n),
               "batch: lora_slots has {} entries, token_ids {}", lora_slots.size(), n);
  for (int64_t slot : slot_mapping) {
    CYPRIS_CHECK(slot < num_blocks * block_size, "batch: slot {} is outside the KV cache ({} slots)", slot,
                 num_blocks * block_size);
  }
  // Entries past a sequence's last block are padding (-1 from the scheduler) and never read.
  for (int s_i = 0; s_i < s; ++s_i) {
    const int32_t q = query_start_loc[s_i + 1] - query_start_loc[s_i];
    CYPRIS_CHECK(max_query_len == 0 || q <= max_query_len,
                 "batch: sequence {} has {} new tokens, more than max_query_len {}", s_i, q, max_query_len);
    CYPRIS_CHECK(max_seq_len == 0 || seq_lens[s_i] <= max_seq_len,
                 "batch: sequence {} has {} tokens, more than max_seq_len {}", s_i, seq_lens[s_i], max_seq_len);
    const int64_t used = (static_cast<int64_t>(seq_lens[s_i]) + block_size - 1) / block_size;
    CYPRIS_CHECK(used <= max_blocks_per_seq, "batch: sequence {} has {} tokens but its block table holds {} blocks",
                 s_i, seq_lens[s_i], max_blocks_per_seq);
    for (int64_t k = 0; k < used; ++k) {
      const int32_t id = block_tables[static_cast<size_t>(s_i) * max_blocks_per_seq + k];
      CYPRIS_CHECK(id >= 0 && id < num_blocks, "batch: block table names block {}, the cache has {}", id, num_blocks);
    }
  }
  for (int32_t i : logits_indices) {
    CYPRIS_CHECK(i >= 0 && i < n, "batch: logits index {} is outside [0, {})", i, n);
  }
  CYPRIS_CHECK(sampled_seqs.size() <= logits_indices.size(), "batch: {} sampled sequences for {} logits rows",
               sampled_seqs.size(), logits_indices.size());
}

BatchContext build_batch_context(const SchedulerOutput& output) {
  BatchContext b;
  const int64_t bs = output.block_size;
  b.token_ids.reserve(size_t(output.total_num_scheduled_tokens));
  b.positions.reserve(size_t(output.total_num_scheduled_tokens));
  b.slot_mapping.reserve(size_t(output.total_num_scheduled_tokens));
  b.query_start_loc.push_back(0);
  for (const auto& s : output.scheduled)
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, int32_t(s.block_ids.size()));
  b.block_tables.assign(output.scheduled.size() * size_t(b.max_blocks_per_seq), -1);
  const bool lora = std::any_of(output.scheduled.begin(), output.scheduled.end(),
                                [](const auto& s) { return s.request->lora_slot() >= 0; });
  for (size_t r = 0; r < output.scheduled.size(); ++r) {
    const auto& s = output.scheduled[r];
    auto tokens = s.request->all_token_ids();
    const int32_t known = int32_t(tokens.size());
    const int32_t num_spec = int32_t(s.spec_token_ids.size());
    const int32_t end = s.num_computed_tokens + s.num_scheduled_tokens;
    if (end > known + num_spec || int64_t(s.block_ids.size()) * bs < end ||
        (num_spec > 0 && end != known + num_spec))
      throw std::logic_error("build_batch_context: scheduled tokens beyond the request's tokens or blocks");
    for (int32_t pos = s.num_computed_tokens; pos < end; ++pos) {
      b.token_ids.push_back(pos < known ? tokens[size_t(pos)] : s.spec_token_ids[size_t(pos - known)]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(int64_t(s.block_ids[size_t(pos / bs)]) * bs + pos % bs);
    }
    if (lora) b.lora_slots.resize(b.token_ids.size(), s.request->lora_slot());
    b.query_start_loc.push_back(int32_t(b.token_ids.size()));
    b.seq_lens.push_back(end);
    std::copy(s.block_ids.begin(), s.block_ids.end(), b.block_tables.begin() + ptrdiff_t(r) * b.max_blocks_per_seq);
    b.max_query_len = std::max(b.max_query_len, s.num_scheduled_tokens);
    b.max_seq_len = std::max(b.max_seq_len, end);
    if (s.samples) {  // the last known token, then each draft (speculative decoding)
      for (int32_t i = num_spec; i >= 0; --i) {
        b.logits_indices.push_back(int32_t(b.token_ids.size()) - 1 - i);
        b.sampled_seqs.push_back(int32_t(r));
      }
    }
  }
  return b;
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
  b.max_query_len = n;
  b.max_seq_len = start + n;
  b.max_blocks_per_seq = (start + n + block_size - 1) / block_size;
  for (int32_t k = 0; k < b.max_blocks_per_seq; ++k) b.block_tables.push_back(k);
  if (n > 0) b.logits_indices = {n - 1};
  return b;
}

}  // namespace cypris
