#include "engine/backend/cpu/host_pool.h"

#include <cstdlib>
#include <new>

namespace cypris {

HostBlockPool::~HostBlockPool() {
  for (auto& [bytes, list] : free_) {
    for (void* p : list) std::free(p);
  }
}

size_t HostBlockPool::size_class(size_t bytes) {
  if (bytes < kMinPooled) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  size_t pow2 = kMinPooled;
  while (pow2 < bytes) pow2 <<= 1;
  const size_t step = pow2 / 16;  // bytes lies in (pow2 / 2, pow2]: classes pow2/2 + i * pow2/16
  return (bytes + step - 1) / step * step;
}

size_t HostBlockPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

std::shared_ptr<void> HostBlockPool::get(size_t bytes) {
  if (bytes == 0) return nullptr;  // an empty tensor has no memory
  const size_t size = size_class(bytes);
  if (size < kMinPooled) {
    void* p = std::aligned_alloc(kAlignment, size);
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
    }
  }
  if (!p) {
    p = std::aligned_alloc(kAlignment, size);
    if (!p) {
      // Give the cached blocks back and try once more before failing.
      std::map<size_t, std::vector<void*>> drop;
      {
        std::lock_guard<std::mutex> lock(mu_);
        drop.swap(free_);
        cached_ = 0;
      }
      for (auto& [b, list] : drop) {
        for (void* q : list) std::free(q);
      }
      p = std::aligned_alloc(kAlignment, size);
      if (!p) throw std::bad_alloc();
    }
  }
  std::shared_ptr<HostBlockPool> self = shared_from_this();
  return std::shared_ptr<void>(p, [self, size](void* q) { self->put(q, size); });
}

void HostBlockPool::put(void* p, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + bytes <= max_cached_) {
      free_[bytes].push_back(p);
      cached_ += bytes;
      return;
    }
  }
  std::free(p);
}

}  // namespace cypris
