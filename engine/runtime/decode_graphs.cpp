#include "engine/runtime/decode_graphs.h"

#include <algorithm>

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

bool is_graph_eligible(const BatchContext& b, const DecodeGraphPolicy& policy) {
  const int n = b.num_seqs();
  if (policy.enforce_eager || n < 1 || b.num_tokens() != n) return false;
  if (padded_graph_batch_size(policy.sizes, n) == 0) return false;
  if (b.logits_indices.size() > static_cast<size_t>(n)) return false;
  if (b.query_start_loc.size() != static_cast<size_t>(n) + 1) return false;
  for (int s = 0; s < n; ++s) {
    if (b.query_start_loc[s + 1] - b.query_start_loc[s] != 1) return false;
    if (b.seq_lens[s] < 1 || b.seq_lens[s] > policy.max_seq_len_to_capture) return false;
  }
  return true;
}

#ifndef CYPRIS_HAVE_CUDA
std::unique_ptr<DecodeGraphRunner> make_decode_graph_runner(Backend&, const DecodeGraphPolicy&, int) {
  return nullptr;
}
#endif

}  // namespace cypris
