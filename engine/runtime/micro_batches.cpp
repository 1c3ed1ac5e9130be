#include "engine/runtime/micro_batches.h"

#include <algorithm>

namespace cypris {

namespace {

MicroBatch slice(const BatchContext& b, int s0, int s1) {
  MicroBatch m;
  m.first_seq = s0;
  BatchContext& o = m.batch;
  const int32_t t0 = b.query_start_loc[static_cast<size_t>(s0)];
  const int32_t t1 = b.query_start_loc[static_cast<size_t>(s1)];
  o.token_ids.assign(b.token_ids.begin() + t0, b.token_ids.begin() + t1);
  o.positions.assign(b.positions.begin() + t0, b.positions.begin() + t1);
  o.slot_mapping.assign(b.slot_mapping.begin() + t0, b.slot_mapping.begin() + t1);
  o.max_blocks_per_seq = b.max_blocks_per_seq;
  for (int s = s0; s <= s1; ++s) o.query_start_loc.push_back(b.query_start_loc[static_cast<size_t>(s)] - t0);
  for (int s = s0; s < s1; ++s) {
    const int32_t len = b.seq_lens[static_cast<size_t>(s)];
    o.seq_lens.push_back(len);
    o.max_seq_len = std::max(o.max_seq_len, len);
    o.max_query_len = std::max(
        o.max_query_len, b.query_start_loc[static_cast<size_t>(s) + 1] - b.query_start_loc[static_cast<size_t>(s)]);
  }
  const size_t w = static_cast<size_t>(b.max_blocks_per_seq);
  o.block_tables.assign(b.block_tables.begin() + static_cast<ptrdiff_t>(s0 * w),
                        b.block_tables.begin() + static_cast<ptrdiff_t>(s1 * w));
  for (size_t r = 0; r < b.logits_indices.size(); ++r) {
    const int32_t t = b.logits_indices[r];
    if (t >= t0 && t < t1) {
      o.logits_indices.push_back(t - t0);
      m.rows.push_back(static_cast<int32_t>(r));
    }
  }
  return m;
}

}  // namespace

std::vector<MicroBatch> split_micro_batches(const BatchContext& b, int parts) {
  const int n = b.num_seqs();
  parts = std::clamp(parts, 1, std::max(1, n));
  std::vector<MicroBatch> out;
  if (parts == 1 || n == 0) {
    MicroBatch m;
    m.batch = b;
    for (size_t r = 0; r < b.logits_indices.size(); ++r) m.rows.push_back(static_cast<int32_t>(r));
    out.push_back(std::move(m));
    return out;
  }
  const int64_t total = b.num_tokens();
  int s0 = 0;
  for (int k = 0; k < parts; ++k) {
    int s1 = n;
    if (k + 1 < parts) {
      // The first sequence end at or past the k+1-th share of the tokens, leaving a sequence for
      // each later part.
      const int64_t target = total * (k + 1) / parts;
      s1 = s0 + 1;
      while (s1 < n - (parts - k - 1) && b.query_start_loc[static_cast<size_t>(s1)] < target) ++s1;
    }
    out.push_back(slice(b, s0, s1));
    s0 = s1;
  }
  return out;
}

}  // namespace cypris
