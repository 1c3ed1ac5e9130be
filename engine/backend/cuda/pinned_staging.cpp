#include "engine/backend/cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>

#include "engine/common/log.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/cuda_check.h"

namespace cypris {

PinnedStaging::PinnedStaging(size_t chunk_bytes) : chunk_(std::max<size_t>(chunk_bytes, 1 << 20)) {
  for (int i = 0; i < 2; ++i) {
    if (cudaMallocHost(&buf_[i], chunk_) != cudaSuccess) {
      cudaGetLastError();  // clear it: the uploads fall back to pageable copies
      LOG_WARN("cannot pin {} MiB of host memory for weight uploads; copying from pageable memory", chunk_ >> 20);
      for (void*& b : buf_) {
        if (b) cudaFreeHost(b);
        b = nullptr;
      }
      return;
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&free_[i], cudaEventDisableTiming));
  }
}

PinnedStaging::~PinnedStaging() {
  for (int i = 0; i < 2; ++i) {
    if (free_[i]) cudaEventSynchronize(free_[i]);
    if (free_[i]) cudaEventDestroy(free_[i]);
    if (buf_[i]) cudaFreeHost(buf_[i]);
  }
}

void PinnedStaging::copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  if (!buf_[0]) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  constexpr size_t kPiece = size_t{4} << 20;  // bytes per host thread task
  ThreadPool& pool = shared_thread_pool();
  int b = 0;
  for (size_t off = 0; off < bytes; off += chunk_, b ^= 1) {
    const size_t n = std::min(chunk_, bytes - off);
    // The GPU may still be copying out of this buffer (chunk i - 2).
    CUDA_CHECK(cudaEventSynchronize(free_[b]));
    char* stage = static_cast<char*>(buf_[b]);
    const char* from = static_cast<const char*>(src) + off;
    const int64_t pieces = static_cast<int64_t>((n + kPiece - 1) / kPiece);
    pool.parallel_for(pieces, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const size_t at = static_cast<size_t>(p) * kPiece;
        std::memcpy(stage + at, from + at, std::min(kPiece, n - at));
      }
    });
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, stage, n, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(free_[b], stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace cypris
