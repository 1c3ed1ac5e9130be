// KV-cache block moves: swap to and from the host pool (--swap-space, preemption by swap) and
// block copies (copy-on-write). The backend does the moving: memcpys on the CPU; on CUDA one
// kernel for all copies and async copies between the device cache and a pinned host pool.
#include "engine/common/error.h"
#include "engine/runtime/model_runner.h"

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
  swap_k_.clear();
  swap_v_.clear();
  for (auto& layer : kv_cache_) {
    std::vector<int64_t> shape = layer.k.view.shape;  // [num_blocks, block_size, kv_heads, head_dim]
    shape[0] = num_cpu_blocks;
    swap_k_.push_back(backend_->empty_host(layer.k.view.dtype, shape));
    swap_v_.push_back(backend_->empty_host(layer.v.view.dtype, shape));
  }
  num_swap_blocks_ = num_cpu_blocks;
}

void ModelRunner::swap_out(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  const std::vector<int64_t> sd = flatten(pairs, num_blocks_, num_swap_blocks_, "swap-out");
  for (size_t l = 0; l < kv_cache_.size(); ++l) {
    backend_->swap_blocks(kv_cache_[l].k.view, swap_k_[l].view, sd);
    backend_->swap_blocks(kv_cache_[l].v.view, swap_v_[l].view, sd);
  }
}

void ModelRunner::swap_in(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  const std::vector<int64_t> sd = flatten(pairs, num_swap_blocks_, num_blocks_, "swap-in");
  for (size_t l = 0; l < kv_cache_.size(); ++l) {
    backend_->swap_blocks(swap_k_[l].view, kv_cache_[l].k.view, sd);
    backend_->swap_blocks(swap_v_[l].view, kv_cache_[l].v.view, sd);
  }
}

void ModelRunner::copy_blocks(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  const std::vector<int64_t> sd = flatten(pairs, num_blocks_, num_blocks_, "block copy");
  std::vector<Tensor> caches;
  caches.reserve(kv_cache_.size() * 2);
  for (auto& layer : kv_cache_) {
    caches.push_back(layer.k.view);
    caches.push_back(layer.v.view);
  }
  backend_->copy_blocks(caches, sd);
}

}  // namespace cypris
