#include "engine/runtime/decode_graphs.h"

#include <algorithm>

#include "engine/common/error.h"

namespace cypris {

std::vector<int> graph_capture_sizes(int64_t max_num_seqs) {
  // vLLM's _BATCH_SIZES_TO_CAPTURE: [1, 2, 4] + [8 * i for i in 1..32].
  std::vector<int> all = {1, 2, 4};
  for (int i = 1; i <= 32; ++i) all.push_back(8 * i);
  std::vector<int> out;
  for (int s : all) {
    out.push_back(s);
    if (s >= max_num_seqs) break;
  }
  return out;
}

int padded_graph_batch_size(const std::vector<int>& sizes, int batch_size) {
  if (batch_size < 1) return 0;
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), batch_size);
  return it == sizes.end() ? 0 : *it;
}

std::vector<int> graph_sizes_for(const DecodeGraphPolicy& policy, int q) {
  if (q == 1) return policy.sizes;
  std::vector<int> out;
  if (q < 1 || q > policy.max_query_len || policy.sizes.empty()) return out;
  const int max_tokens = std::max(policy.sizes.back(), kMinSpecGraphTokens);
  for (int s : policy.sizes) {
    if (s <= kMaxSpecGraphBatch && s * q <= max_tokens) out.push_back(s);
  }
  return out;
}

int max_graph_tokens(const DecodeGraphPolicy& policy) {
  int most = 0;
  for (int q = 1; q <= policy.max_query_len; ++q) {
    const std::vector<int> sizes = graph_sizes_for(policy, q);
    if (!sizes.empty()) most = std::max(most, sizes.back() * q);
  }
  return most;
}

int uniform_query_len(const BatchContext& b) {
  const int n = b.num_seqs();
  if (n < 1 || b.query_start_loc.size() != static_cast<size_t>(n) + 1) return 0;
  const int q = b.query_start_loc[1] - b.query_start_loc[0];
  for (int s = 1; s < n; ++s) {
    if (b.query_start_loc[s + 1] - b.query_start_loc[s] != q) return 0;
  }
  return q >= 1 && b.num_tokens() == n * q ? q : 0;
}

int graph_query_len(const BatchContext& b) {
  const int n = b.num_seqs();
  if (n < 1 || b.query_start_loc.size() != static_cast<size_t>(n) + 1 || b.query_start_loc[0] != 0 ||
      b.query_start_loc[static_cast<size_t>(n)] != b.num_tokens()) {
    return 0;
  }
  int most = 0;
  for (int s = 0; s < n; ++s) {
    const int len = b.query_start_loc[s + 1] - b.query_start_loc[s];
    if (len < 1) return 0;
    most = std::max(most, len);
  }
  return most;
}

bool is_graph_eligible(const BatchContext& b, const DecodeGraphPolicy& policy) {
  const int n = b.num_seqs();
  if (policy.enforce_eager || n < 1) return false;
  const int q = graph_query_len(b);
  if (q < 1 || q > policy.max_query_len) return false;
  if (padded_graph_batch_size(graph_sizes_for(policy, q), n) == 0) return false;
  if (b.logits_indices.size() > static_cast<size_t>(b.num_tokens())) return false;
  for (int32_t i : b.logits_indices) {
    if (i < 0 || i >= b.num_tokens()) return false;
  }
  if (b.seq_lens.size() != static_cast<size_t>(n)) return false;
  for (int s = 0; s < n; ++s) {
    if (b.seq_lens[s] < q || b.seq_lens[s] > policy.max_seq_len_to_capture) return false;
  }
  return true;
}

BatchContext pad_decode_batch(const BatchContext& b, int size, int64_t width, int block_size, int q) {
  const int n = b.num_seqs();
  const size_t r = b.logits_indices.size();
  const size_t tokens = static_cast<size_t>(size) * static_cast<size_t>(std::max(q, 0));
  const int longest = n == 0 ? 0 : graph_query_len(b);
  CYPRIS_CHECK(
      q >= 1 && (n == 0 || (longest >= 1 && longest <= q)) && size >= n && r <= tokens && width >= 1 && block_size >= 1,
      "CUDA graphs: cannot pad a batch of {} sequences and {} tokens to {} sequences of {} tokens", n, b.num_tokens(),
      size, q);
  BatchContext p;
  p.max_blocks_per_seq = static_cast<int32_t>(width);
  p.max_query_len = q;
  p.max_seq_len = std::max(q, b.max_seq_len);
  p.block_tables.assign(static_cast<size_t>(size) * static_cast<size_t>(width), 0);
  p.query_start_loc.push_back(0);
  // pad[i]: the padding tokens in front of sequence i's new tokens.
  std::vector<int> pad(static_cast<size_t>(n));
  for (int i = 0; i < size; ++i) {
    const bool real = i < n;
    if (real) {
      const int first = b.query_start_loc[i];
      const int len = b.query_start_loc[i + 1] - first;
      pad[static_cast<size_t>(i)] = q - len;
      CYPRIS_CHECK(len == q || b.seq_lens[i] >= q,
                   "CUDA graphs: a context of {} tokens cannot take {} padding tokens before its {} new ones",
                   b.seq_lens[i], q - len, len);
      for (int t = 0; t < q - len; ++t) {
        p.token_ids.push_back(0);
        p.positions.push_back(b.seq_lens[i] - q + t);
        p.slot_mapping.push_back(-1);
        if (!b.lora_slots.empty()) p.lora_slots.push_back(-1);
      }
      for (int t = 0; t < len; ++t) {
        p.token_ids.push_back(b.token_ids[static_cast<size_t>(first + t)]);
        p.positions.push_back(b.positions[static_cast<size_t>(first + t)]);
        p.slot_mapping.push_back(b.slot_mapping[static_cast<size_t>(first + t)]);
        // LoRA slots when b has them (padding: -1, the base model); the CUDA graphs carry them in
        // their input buffer (-1 for every row when b has none).
        if (!b.lora_slots.empty()) p.lora_slots.push_back(b.lora_slots[static_cast<size_t>(first + t)]);
      }
    } else {
      for (int t = 0; t < q; ++t) {
        p.token_ids.push_back(0);
        p.positions.push_back(t);
        p.slot_mapping.push_back(-1);
        if (!b.lora_slots.empty()) p.lora_slots.push_back(-1);
      }
    }
    p.query_start_loc.push_back((i + 1) * q);
    p.seq_lens.push_back(real ? b.seq_lens[i] : q);
    if (real) p.max_seq_len = std::max(p.max_seq_len, b.seq_lens[i]);
    if (!real) continue;
    // Only the blocks the context uses are read.
    const int64_t used = (static_cast<int64_t>(b.seq_lens[i]) + block_size - 1) / block_size;
    CYPRIS_CHECK(used <= width && used <= b.max_blocks_per_seq,
                 "CUDA graphs: a context of {} tokens does not fit block tables of {} entries", b.seq_lens[i], width);
    std::copy_n(b.block_tables.begin() + static_cast<int64_t>(i) * b.max_blocks_per_seq, used,
                p.block_tables.begin() + static_cast<int64_t>(i) * width);
  }
  for (size_t j = 0; j < tokens; ++j) {
    if (j >= r) {
      p.logits_indices.push_back(static_cast<int32_t>(j));
      continue;
    }
    // b's token index -> its sequence -> where that token sits in the padded batch.
    const int32_t idx = b.logits_indices[j];
    CYPRIS_CHECK(idx >= 0 && idx < b.num_tokens(), "CUDA graphs: logits row {} names token {} of {}", j, idx,
                 b.num_tokens());
    const auto it = std::upper_bound(b.query_start_loc.begin(), b.query_start_loc.end(), idx);
    const size_t seq = static_cast<size_t>(it - b.query_start_loc.begin()) - 1;
    p.logits_indices.push_back(static_cast<int32_t>(seq) * q + pad[seq] + (idx - b.query_start_loc[seq]));
  }
  return p;
}

#ifndef CYPRIS_HAVE_CUDA
std::unique_ptr<DecodeGraphRunner> make_decode_graph_runner(Backend&, const DecodeGraphPolicy&, int) {
  return nullptr;
}
#endif

}  // namespace cypris
