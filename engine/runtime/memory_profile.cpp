#include "engine/runtime/memory_profile.h"

#include <algorithm>
#include <cmath>

#include "engine/common/error.h"
#include "engine/backend/tp_workers.h"  // kv_heads_per_rank

namespace cypris {

int64_t kv_cache_blocks(const GpuMemoryBudget& m) {
  CYPRIS_CHECK(m.utilization > 0 && m.utilization <= 1.0, "--gpu-memory-utilization {} must be in (0, 1]",
               m.utilization);
  CYPRIS_CHECK(m.bytes_per_block > 0, "KV cache: a block of {} bytes", m.bytes_per_block);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double allowed = m.utilization * static_cast<double>(m.total_bytes);
  const double left = allowed - static_cast<double>(m.used_bytes) - static_cast<double>(m.activation_peak) -
                      static_cast<double>(m.graph_reserve) - static_cast<double>(m.sampler_scratch);
  const double blocks = left > 0 ? std::floor(left / static_cast<double>(m.bytes_per_block)) : 0.0;
  CYPRIS_CHECK(blocks >= 1,
               "--gpu-memory-utilization {}: no room for the KV cache: {:.2f} of {:.2f} GiB allowed, {:.2f} GiB in use "
               "after loading the weights, {:.2f} GiB profiled for activations, {:.2f} GiB kept for CUDA graphs, "
               "{:.2f} GiB for GPU sampling; raise --gpu-memory-utilization or lower --max-num-batched-tokens / "
               "--max-num-seqs (or pass --enforce-eager)",
               m.utilization, allowed / kGiB, static_cast<double>(m.total_bytes) / kGiB,
               static_cast<double>(m.used_bytes) / kGiB, static_cast<double>(m.activation_peak) / kGiB,
               static_cast<double>(m.graph_reserve) / kGiB, static_cast<double>(m.sampler_scratch) / kGiB);
  return static_cast<int64_t>(blocks);
}

int64_t kv_cache_bytes_per_block(const ModelConfig& cfg, int block_size, int tp, DType kv_cache_dtype) {
  return int64_t{2} * cfg.num_hidden_layers * block_size * kv_heads_per_rank(cfg.num_key_value_heads, tp) * tp *
         cfg.head_dim * static_cast<int64_t>(dtype_size(kv_cache_dtype));
}

BatchContext make_profile_prefill_batch(int64_t num_tokens, int64_t num_seqs, int64_t max_model_len, int block_size) {
  CYPRIS_CHECK(num_tokens >= 1 && max_model_len >= 1 && block_size >= 1,
               "memory profile: {} tokens, max model length {}, block size {}", num_tokens, max_model_len, block_size);
  const int64_t seqs = std::clamp<int64_t>(num_seqs, 1, num_tokens);
  BatchContext b;
  int64_t longest = 0;
  std::vector<int64_t> lens(static_cast<size_t>(seqs));
  for (int64_t s = 0; s < seqs; ++s) {
    lens[s] = num_tokens / seqs + (s < num_tokens % seqs ? 1 : 0);
    longest = std::max(longest, lens[s]);
  }
  b.max_blocks_per_seq = static_cast<int32_t>((longest + block_size - 1) / block_size);
  b.max_query_len = static_cast<int32_t>(longest);
  b.max_seq_len = static_cast<int32_t>(longest);
  b.query_start_loc.push_back(0);
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t i = 0; i < lens[s]; ++i) {
      b.token_ids.push_back(0);
      b.positions.push_back(static_cast<int32_t>(i % max_model_len));
      b.slot_mapping.push_back(-1);
    }
    b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.seq_lens.push_back(static_cast<int32_t>(lens[s]));
    b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
  }
  b.block_tables.assign(static_cast<size_t>(seqs) * b.max_blocks_per_seq, 0);
  return b;
}

BatchContext make_profile_decode_batch(int num_seqs, int32_t seq_len, int block_size) {
  CYPRIS_CHECK(num_seqs >= 1 && seq_len >= 1 && block_size >= 1, "memory profile: {} decodes of length {}", num_seqs,
               seq_len);
  BatchContext b;
  b.max_blocks_per_seq = (seq_len + block_size - 1) / block_size;
  b.max_query_len = 1;
  b.max_seq_len = seq_len;
  for (int s = 0; s < num_seqs; ++s) {
    b.token_ids.push_back(0);
    b.positions.push_back(seq_len - 1);
    b.slot_mapping.push_back(-1);
    b.query_start_loc.push_back(s);
    b.seq_lens.push_back(seq_len);
    b.logits_indices.push_back(s);
  }
  b.query_start_loc.push_back(num_seqs);
  b.block_tables.assign(static_cast<size_t>(num_seqs) * b.max_blocks_per_seq, 0);
  return b;
}

}  // namespace cypris
