// Activation memory of the CPU backend. A forward pass allocates and frees the same few dozen
// activation buffers every step, many of them megabytes (a 512-token prefill of a 768-wide model
// routes 4096 rows through a MoE layer: 12 MiB a buffer); glibc serves such sizes with mmap, so
// every step mapped, faulted in and unmapped fresh pages (~10% of prefill time, most of it in the
// kernel). The pool keeps freed blocks by size class and hands them out again. Blocks under
// kMinPooled come from malloc directly; at most max_cached_bytes of free blocks are kept (a block
// that would exceed it is freed), so an idle engine holds no more than that beyond what is in use.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace cypris {

class HostBlockPool : public std::enable_shared_from_this<HostBlockPool> {
 public:
  static constexpr size_t kMinPooled = size_t{64} << 10;
  static constexpr size_t kAlignment = 64;

  // Use through std::make_shared: the blocks handed out keep the pool alive.
  explicit HostBlockPool(size_t max_cached_bytes) : max_cached_(max_cached_bytes) {}
  ~HostBlockPool();
  HostBlockPool(const HostBlockPool&) = delete;
  HostBlockPool& operator=(const HostBlockPool&) = delete;

  // At least `bytes` bytes, kAlignment-aligned, uninitialised; returned to the pool (or freed)
  // when the last owner lets go; null for 0 bytes. Throws std::bad_alloc when memory runs out.
  std::shared_ptr<void> get(size_t bytes);

  // The size a request of `bytes` is served with: steps of 1/16 of the enclosing power of two
  // (at most 12.5% unused), so activations whose row count changes a little share blocks.
  static size_t size_class(size_t bytes);
  // Bytes held in free blocks.
  size_t cached_bytes() const;

 private:
  void put(void* p, size_t bytes);

  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t max_cached_;
};

}  // namespace cypris
