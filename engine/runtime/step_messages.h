// What process 0 sends the other processes of an MPI run each step (docs/distributed.md, "Several
// machines"): the BatchContext as flat arrays and the KV block moves, framed on MpiWorld's control
// channel. Encoding is plain bytes in this machine's order (every process runs the same build);
// decoding checks every length against the bytes received and throws Error on a short or malformed
// message, never reading past it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv/kv_cache_manager.h"  // BlockCopy
#include "engine/scheduler/batch_context.h"

namespace cypris {

// Control message kinds after MpiWorld's own stop (kControlStop = 0).
enum class StepMessage : int64_t {
  kExecute = 1,       // a BatchContext: run the forward pass
  kSwapOut = 2,       // BlockCopy pairs
  kSwapIn = 3,        // BlockCopy pairs
  kCopyBlocks = 4,    // BlockCopy pairs
  kAllocateSwap = 5,  // one int64: the swap pool's blocks
};
const char* step_message_name(int64_t kind);

std::vector<char> encode_batch(const BatchContext& b);
BatchContext decode_batch(std::span<const char> bytes);

std::vector<char> encode_block_copies(std::span<const BlockCopy> pairs);
std::vector<BlockCopy> decode_block_copies(std::span<const char> bytes);

std::vector<char> encode_int64(int64_t v);
int64_t decode_int64(std::span<const char> bytes);

}  // namespace cypris
