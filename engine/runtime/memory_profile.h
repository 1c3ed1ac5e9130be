// Sizing the KV cache: the bytes of one block (the one formula for every device), and for
// --gpu-memory-utilization a profile run (vLLM's determine_num_available_blocks): the dummy
// batches the ModelRunner runs before the cache exists, and the arithmetic that turns the
// measured peak into a number of blocks. Pure logic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/common/dtype.h"
#include "engine/loader/model_config.h"
#include "engine/scheduler/batch_context.h"

namespace cypris {

// K and V of every layer for one block of block_size tokens, summed over the tp ranks (each rank
// holds its KV heads; replicated heads count on every rank that holds them).
int64_t kv_cache_bytes_per_block(const ModelConfig& cfg, int block_size, int tp, DType kv_cache_dtype);

// What the KV cache may take, all in bytes of one device.
struct GpuMemoryBudget {
  double utilization = 0.9;     // --gpu-memory-utilization: the fraction of total_bytes Cypris may use
  size_t total_bytes = 0;       // the device's memory
  size_t used_bytes = 0;        // in use once the weights are loaded (weights, CUDA context, cuBLAS)
  size_t activation_peak = 0;   // profiled peak of one step's activations
  size_t graph_reserve = 0;     // memory the decode CUDA graphs will keep (0 with --enforce-eager)
  size_t sampler_scratch = 0;   // the GPU sampler's [max_num_seqs, vocab] fp32 + int32 buffers (0 without)
  int64_t bytes_per_block = 0;  // one KV block of every layer on this device
};

// floor((utilization * total - used - activation_peak - graph_reserve - sampler_scratch) / bytes_per_block).
// Throws Error naming --gpu-memory-utilization when not even one block fits.
int64_t kv_cache_blocks(const GpuMemoryBudget& m);

// The largest step the scheduler can build: num_tokens prompt tokens split as evenly as possible
// over num_seqs sequences (clamped to [1, num_tokens]), positions wrapping at max_model_len. Its
// K/V go nowhere (slot -1) and every block table entry is block 0, so a one-block cache per layer
// is enough to run it. Logits for each sequence's last token.
BatchContext make_profile_prefill_batch(int64_t num_tokens, int64_t num_seqs, int64_t max_model_len, int block_size);

// num_seqs one-token decodes, each with a context of seq_len tokens (all in block 0, no K/V
// written): the shape of the largest CUDA graph.
BatchContext make_profile_decode_batch(int num_seqs, int32_t seq_len, int block_size);

}  // namespace cypris
