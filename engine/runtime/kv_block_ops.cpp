// KV-cache block moves: swap to and from the host pool (--swap-space, preemption by swap) and
// block copies (copy-on-write). The CPU backend's cache is host memory, so these are memcpys of
// whole blocks across every layer's K and V, on every tensor-parallel rank (each holds its heads).
#include <cstring>

#include "engine/common/error.h"
#include "engine/runtime/model_runner.h"

namespace cypris {

namespace {

size_t block_bytes(const Tensor& layer_cache) {
  // [num_blocks, block_size, kv_heads, head_dim]
  return static_cast<size_t>(layer_cache.shape[1] * layer_cache.shape[2] * layer_cache.shape[3]) *
         dtype_size(layer_cache.dtype);
}

char* block_ptr(void* base, int64_t block, size_t bytes) { return static_cast<char*>(base) + block * bytes; }

}  // namespace

void ModelRunner::allocate_swap_space(int64_t num_cpu_blocks) {
  CYPRIS_CHECK(num_cpu_blocks >= 0, "swap space of {} blocks", num_cpu_blocks);
  CYPRIS_CHECK(backend().device() == Device::Cpu, "swapping KV blocks is not supported yet on this backend");
  for_each_rank([&](Rank& r) {
    r.swap_k.clear();
    r.swap_v.clear();
    for (auto& layer : r.kv_cache) {
      const size_t bytes = block_bytes(layer.k.view);
      HostTensor k, v;
      k.buffer = Buffer(bytes * static_cast<size_t>(num_cpu_blocks));
      v.buffer = Buffer(bytes * static_cast<size_t>(num_cpu_blocks));
      k.dtype = v.dtype = layer.k.view.dtype;
      r.swap_k.push_back(std::move(k));
      r.swap_v.push_back(std::move(v));
    }
  });
  num_swap_blocks_ = num_cpu_blocks;
}

void ModelRunner::swap_out(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  for (const auto& p : pairs) {
    CYPRIS_CHECK(p.src >= 0 && p.src < num_blocks_ && p.dst >= 0 && p.dst < num_swap_blocks_,
                 "swap-out pair ({}, {}) is out of range", p.src, p.dst);
  }
  for_each_rank([&](Rank& r) {
    for (size_t l = 0; l < r.kv_cache.size(); ++l) {
      const size_t bytes = block_bytes(r.kv_cache[l].k.view);
      for (const auto& p : pairs) {
        std::memcpy(block_ptr(r.swap_k[l].buffer.data(), p.dst, bytes),
                    block_ptr(r.kv_cache[l].k.view.data, p.src, bytes), bytes);
        std::memcpy(block_ptr(r.swap_v[l].buffer.data(), p.dst, bytes),
                    block_ptr(r.kv_cache[l].v.view.data, p.src, bytes), bytes);
      }
    }
  });
}

void ModelRunner::swap_in(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  for (const auto& p : pairs) {
    CYPRIS_CHECK(p.src >= 0 && p.src < num_swap_blocks_ && p.dst >= 0 && p.dst < num_blocks_,
                 "swap-in pair ({}, {}) is out of range", p.src, p.dst);
  }
  for_each_rank([&](Rank& r) {
    for (size_t l = 0; l < r.kv_cache.size(); ++l) {
      const size_t bytes = block_bytes(r.kv_cache[l].k.view);
      for (const auto& p : pairs) {
        std::memcpy(block_ptr(r.kv_cache[l].k.view.data, p.dst, bytes),
                    block_ptr(r.swap_k[l].buffer.data(), p.src, bytes), bytes);
        std::memcpy(block_ptr(r.kv_cache[l].v.view.data, p.dst, bytes),
                    block_ptr(r.swap_v[l].buffer.data(), p.src, bytes), bytes);
      }
    }
  });
}

void ModelRunner::copy_blocks(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  for (const auto& p : pairs) {
    CYPRIS_CHECK(p.src >= 0 && p.src < num_blocks_ && p.dst >= 0 && p.dst < num_blocks_,
                 "block copy ({}, {}) is out of range", p.src, p.dst);
  }
  for_each_rank([&](Rank& r) {
    for (auto& layer : r.kv_cache) {
      const size_t bytes = block_bytes(layer.k.view);
      for (const auto& p : pairs) {
        std::memcpy(block_ptr(layer.k.view.data, p.dst, bytes), block_ptr(layer.k.view.data, p.src, bytes), bytes);
        std::memcpy(block_ptr(layer.v.view.data, p.dst, bytes), block_ptr(layer.v.view.data, p.src, bytes), bytes);
      }
    }
  });
}

}  // namespace cypris
