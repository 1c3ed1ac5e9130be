// CUDA graphs for decode steps (vLLM's scheme), as the ModelRunner sees them: which batches may
// replay a captured graph and at which padded size (pure logic, unit-tested on the CPU), and the
// DecodeGraphRunner interface the CUDA implementation (engine/runtime/cuda/cuda_graphs.cpp)
// provides. A graph is captured per (batch size, query tokens per sequence): 1 for plain decodes,
// and with speculative decoding 2 .. k + 1 for decodes that verify their drafts. A batch whose
// sequences verify different numbers of drafts (the adaptive draft length, a sequence without
// drafts) replays the graph of its longest: shorter sequences get padding query tokens in front of
// theirs, which write no KV and whose outputs are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/scheduler/batch_context.h"

namespace cypris {

class Model;
struct KvCacheLayer;

// vLLM's batch sizes to capture, 1, 2, 4, 8, 16, 24, ..., 256, up to and including the first one
// that holds max_num_seqs (a batch never has more sequences, so larger graphs would never run).
std::vector<int> graph_capture_sizes(int64_t max_num_seqs);

// The smallest capture size (sizes ascending) that holds batch_size sequences; 0 when none does.
int padded_graph_batch_size(const std::vector<int>& sizes, int batch_size);

struct DecodeGraphPolicy {
  bool enforce_eager = true;
  std::vector<int> sizes;              // ascending, from graph_capture_sizes
  int64_t max_seq_len_to_capture = 0;  // longest context (tokens) a graph's block tables hold
  // Query tokens per sequence graphs are captured for: 1 .. max_query_len (k + 1 with speculative
  // decoding, else 1). Graphs of q > 1 are captured for the sizes up to kMaxSpecGraphBatch whose
  // size * q tokens are no more than the largest plain decode graph's or kMinSpecGraphTokens.
  int max_query_len = 1;
};
inline constexpr int kMaxSpecGraphBatch = 8;
inline constexpr int kMinSpecGraphTokens = 64;

// The capture sizes (ascending) for graphs of q query tokens per sequence under the policy.
std::vector<int> graph_sizes_for(const DecodeGraphPolicy& policy, int q);
// The most tokens any graph of the policy runs (for the memory profile).
int max_graph_tokens(const DecodeGraphPolicy& policy);
// The number of new tokens of every sequence of b when they all have the same, else 0.
int uniform_query_len(const BatchContext& b);
// The most new tokens any sequence of b has (the query length of the graph it would replay); 0 for
// an empty batch or one whose query_start_loc does not describe its tokens.
int graph_query_len(const BatchContext& b);

// A batch replays a graph when graphs are on, its longest sequence has q new tokens with
// 1 <= q <= max_query_len, the padded size exists for q, every context holds at least q tokens (the
// front padding of a shorter sequence sits on its cached positions) and none is longer than
// max_seq_len_to_capture, and it asks for at most one logits row per new token.
bool is_graph_eligible(const BatchContext& b, const DecodeGraphPolicy& policy);

// The batch a graph of `size` sequences of q tokens runs for the eligible batch b: b's sequences,
// each with q - (its new tokens) padding tokens in front (token 0 at the cached positions just
// before its new tokens, slot -1 so no KV is written: its new tokens keep their positions and see
// the same keys, the padding's outputs are dropped), then padding sequences (q tokens 0 at
// positions 0..q-1, slot -1, a context of q tokens in block 0 - any valid block), block tables
// `width` entries wide (b's used entries, zeros after), and size * q logits indices: b's rows
// first (moved to where their tokens now are), then the padding tokens'. The first
// b.logits_indices.size() logits rows are b's.
BatchContext pad_decode_batch(const BatchContext& b, int size, int64_t width, int block_size, int q = 1);

// Captures one graph per capture size over persistent input buffers and replays them. Lives on
// one backend (one GPU); every call must come from the thread that uses that backend.
class DecodeGraphRunner {
 public:
  virtual ~DecodeGraphRunner() = default;
  // Warms up and captures every size of the policy, largest first. The KV cache must be in
  // place: the graphs bake in its addresses. Returns the seconds it took.
  virtual double capture(Model& model, std::vector<KvCacheLayer>& kv_cache) = 0;
  // Copies an eligible batch into the input buffers (padding rows write no KV and their logits
  // are dropped), replays the graph of its padded size and query length and returns its logits
  // [logits_indices.size(), vocab] on the device, valid until the next replay.
  virtual Tensor replay(const BatchContext& b) = 0;
  virtual int num_graphs() const = 0;
  // Device memory the graphs' private pool holds (their activations).
  virtual size_t pool_bytes() const = 0;
};

// A runner for a CUDA backend; null for any other backend or in a build without CUDA.
std::unique_ptr<DecodeGraphRunner> make_decode_graph_runner(Backend& backend, const DecodeGraphPolicy& policy,
                                                            int block_size);

}  // namespace cypris
