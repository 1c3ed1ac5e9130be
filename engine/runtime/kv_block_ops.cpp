// KV-cache block moves: swap to and from the host pool (--swap-space, preemption by swap) and
// block copies (copy-on-write), on every tensor-parallel rank (each holds its heads). The backend
// does the moving: memcpys on the CPU; on CUDA one kernel for all copies and async copies between
// the device cache and a pinned host pool.
#include "engine/common/error.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/mpi_worker.h"

namespace cypris {

namespace {

std::vector<int64_t> flatten(std::span<const BlockCopy> pairs, int64_t src_limit, int64_t dst_limit,
                             const char* what) {
  std::vector<int64_t> out;
  out.reserve(pairs.size() * 2);
  for (const auto& p : pairs) {
    CYPRIS_CHECK(p.src >= 0 && p.src < src_limit && p.dst >= 0 && p.dst < dst_limit, "{} pair ({}, {}) is out of range",
                 what, p.src, p.dst);
    out.push_back(p.src);
    out.push_back(p.dst);
  }
  return out;
}

}  // namespace

void ModelRunner::allocate_swap_space(int64_t num_cpu_blocks) {
  CYPRIS_CHECK(num_cpu_blocks >= 0, "swap space of {} blocks", num_cpu_blocks);
  if (drives_processes_) send_to_mpi_workers(StepMessage::kAllocateSwap, encode_int64(num_cpu_blocks));
  for_each_rank([&](Rank& r) {
    r.swap_k.clear();
    r.swap_v.clear();
    for (auto& layer : r.kv_cache) {
      std::vector<int64_t> shape = layer.k.view.shape;  // [num_blocks, block_size, kv_heads, head_dim]
      shape[0] = num_cpu_blocks;
      r.swap_k.push_back(r.backend->empty_host(layer.k.view.dtype, shape));
      r.swap_v.push_back(r.backend->empty_host(layer.v.view.dtype, shape));
    }
  });
  num_swap_blocks_ = num_cpu_blocks;
}

void ModelRunner::swap_out(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  const std::vector<int64_t> sd = flatten(pairs, num_blocks_, num_swap_blocks_, "swap-out");
  if (drives_processes_) send_to_mpi_workers(StepMessage::kSwapOut, encode_block_copies(pairs));
  for_each_rank([&](Rank& r) {
    for (size_t l = 0; l < r.kv_cache.size(); ++l) {
      r.backend->swap_blocks(r.kv_cache[l].k.view, r.swap_k[l].view, sd);
      r.backend->swap_blocks(r.kv_cache[l].v.view, r.swap_v[l].view, sd);
    }
  });
}

void ModelRunner::swap_in(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  const std::vector<int64_t> sd = flatten(pairs, num_swap_blocks_, num_blocks_, "swap-in");
  if (drives_processes_) send_to_mpi_workers(StepMessage::kSwapIn, encode_block_copies(pairs));
  for_each_rank([&](Rank& r) {
    for (size_t l = 0; l < r.kv_cache.size(); ++l) {
      r.backend->swap_blocks(r.swap_k[l].view, r.kv_cache[l].k.view, sd);
      r.backend->swap_blocks(r.swap_v[l].view, r.kv_cache[l].v.view, sd);
    }
  });
}

void ModelRunner::copy_blocks(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  const std::vector<int64_t> sd = flatten(pairs, num_blocks_, num_blocks_, "block copy");
  if (drives_processes_) send_to_mpi_workers(StepMessage::kCopyBlocks, encode_block_copies(pairs));
  for_each_rank([&](Rank& r) {
    std::vector<Tensor> caches;
    caches.reserve(r.kv_cache.size() * 2);
    for (auto& layer : r.kv_cache) {
      caches.push_back(layer.k.view);
      caches.push_back(layer.v.view);
    }
    r.backend->copy_blocks(caches, sd);
  });
}

}  // namespace cypris
