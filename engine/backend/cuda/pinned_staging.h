// Weight uploads through pinned memory: host-to-device copies from pageable memory go through the
// driver's own small staging buffer, one synchronous piece at a time. Here two pinned buffers take
// turns (double buffering): while the GPU copies chunk i out of one, the host threads fill the other
// with chunk i + 1, so the host copy and the DMA overlap and both run near their bandwidth.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace cypris {

class PinnedStaging {
 public:
  // chunk_bytes: the size of each of the two pinned buffers.
  explicit PinnedStaging(size_t chunk_bytes = size_t{64} << 20);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Copies bytes from host memory src to device memory dst, queued on stream; returns when the
  // copy is complete (src may be freed). Without pinned memory (cudaMallocHost failed) it falls
  // back to one pageable cudaMemcpyAsync.
  void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);

 private:
  size_t chunk_ = 0;
  void* buf_[2] = {nullptr, nullptr};
  cudaEvent_t free_[2] = {nullptr, nullptr};  // recorded after the copy out of buf_[i] was queued
};

}  // namespace cypris
