// Model-runner batches for the LoRA tests: several whole sequences in one prefill, each with its
// adapter slot, and a greedy continuation in one slot.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/runtime/model_runner.h"
#include "tests/support/reference_fixture.h"

namespace cypris::reference_fixture {

// One prefill of several whole sequences (sequence s in blocks 2s, 2s + 1; at most 32 tokens), each
// with its LoRA slot, and the logits of every position.
inline Logits multi_prefill(ModelRunner& runner, const std::vector<std::vector<int32_t>>& seqs,
                            const std::vector<int32_t>& slots) {
  BatchContext b;
  const int bs = runner.block_size();
  b.max_blocks_per_seq = 2;
  b.query_start_loc.push_back(0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto& ids = seqs[s];
    for (int32_t p = 0; p < static_cast<int32_t>(ids.size()); ++p) {
      b.token_ids.push_back(ids[static_cast<size_t>(p)]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(int64_t{2 * static_cast<int64_t>(s) + p / bs} * bs + p % bs);
      b.lora_slots.push_back(slots[s]);
      b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
    }
    b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.seq_lens.push_back(static_cast<int32_t>(ids.size()));
    b.block_tables.push_back(static_cast<int32_t>(2 * s));
    b.block_tables.push_back(static_cast<int32_t>(2 * s + 1));
    b.max_query_len = std::max<int32_t>(b.max_query_len, static_cast<int32_t>(ids.size()));
    b.max_seq_len = b.max_query_len;
  }
  return runner.execute(b);
}

// Greedy continuation of the first 12 ids by prefill then one-token decodes, all in slot.
inline std::vector<int32_t> lora_greedy(ModelRunner& runner, std::vector<int32_t> ids, int n, int32_t slot) {
  ids.resize(12);
  BatchContext b = make_single_sequence_batch(ids, 0, runner.block_size());
  b.lora_slots.assign(ids.size(), slot);
  Logits l = runner.execute(b);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t tok = argmax(l.row(0), l.vocab);
    out.push_back(tok);
    const int32_t pos = static_cast<int32_t>(ids.size() + out.size()) - 1;
    std::vector<int32_t> one = {tok};
    BatchContext d = make_single_sequence_batch(one, pos, runner.block_size());
    d.lora_slots = {slot};
    l = runner.execute(d);
  }
  return out;
}

}  // namespace cypris::reference_fixture
