#include "engine/backend/cuda/weight_streamer.h"

#include <cstring>

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"

namespace cypris {
namespace {

constexpr size_t kAlign = 256;  // every weight starts where a vectorised kernel may read it

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

WeightStreamer::WeightStreamer(const WeightOffloadPlan& plan, int device, cudaStream_t stream)
    : plan_(plan), device_(device), main_(stream) {
  CYPRIS_CHECK(!plan.empty() && plan.slot_bytes >= 0, "--cpu-offload-gb: an empty offload plan");
  capacity_ = align_up(static_cast<size_t>(plan.slot_capacity()));
  const size_t bytes = capacity_ * static_cast<size_t>(plan.staging_slots());
  const cudaError_t err = cudaMalloc(&slots_, bytes);
  CYPRIS_CHECK(err == cudaSuccess,
               "--cpu-offload-gb: cannot allocate {:.1f} MiB on the GPU for the staging slots of the offloaded layers "
               "({})",
               static_cast<double>(bytes) / (1 << 20), cudaGetErrorString(err));
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  for (cudaEvent_t& e : ready_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&free_, cudaEventDisableTiming));
  copies_.resize(static_cast<size_t>(plan.num_layers()));
  used_.assign(static_cast<size_t>(plan.num_layers()), 0);
}

WeightStreamer::~WeightStreamer() {
  if (copy_) cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : ready_) {
    if (e) cudaEventDestroy(e);
  }
  if (free_) cudaEventDestroy(free_);
  if (copy_) cudaStreamDestroy(copy_);
  if (slots_) cudaFree(slots_);
}

std::optional<DeviceTensor> WeightStreamer::place(const HostTensor& host) {
  const size_t k = static_cast<size_t>(loading_ - plan_.first_layer);
  Tensor view(nullptr, host.dtype, host.shape, Device::Cuda);
  view.device_index = device_;
  const size_t bytes = view.nbytes();
  if (bytes == 0) return DeviceTensor{view, nullptr};
  CYPRIS_CHECK(host.buffer.size() >= bytes, "upload_weight: host buffer of {} bytes for {} bytes", host.buffer.size(),
               bytes);
  const size_t off = align_up(used_[k]);
  if (off + bytes > capacity_) {
    resident_bytes_ += static_cast<int64_t>(bytes);
    return std::nullopt;
  }
  void* pinned = nullptr;
  const cudaError_t err = cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault);
  CYPRIS_CHECK(err == cudaSuccess,
               "--cpu-offload-gb: cannot pin {:.1f} MiB of host memory for layer {}'s weights ({}); lower "
               "--cpu-offload-gb",
               static_cast<double>(bytes) / (1 << 20), loading_, cudaGetErrorString(err));
  std::shared_ptr<void> owner(pinned, [](void* p) { cudaFreeHost(p); });
  std::memcpy(pinned, host.buffer.data(), bytes);
  view.data = slot_data(slot_of(loading_)) + off;
  used_[k] = off + bytes;
  copies_[k].push_back({view.data, owner, bytes});
  host_bytes_ += static_cast<int64_t>(bytes);
  return DeviceTensor{view, owner};
}

void WeightStreamer::issue(int layer) {
  // The slot's last reader (layer - 2, or an earlier forward pass) is queued on the main stream
  // before this point.
  CUDA_CHECK(cudaEventRecord(free_, main_));
  CUDA_CHECK(cudaStreamWaitEvent(copy_, free_, 0));
  for (const Copy& c : copies_[static_cast<size_t>(layer - plan_.first_layer)]) {
    CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src.get(), c.bytes, cudaMemcpyHostToDevice, copy_));
  }
  CUDA_CHECK(cudaEventRecord(ready_[slot_of(layer)], copy_));
  issued_ = layer;
}

void WeightStreamer::begin_layers() {
  issued_ = -1;
  issue(plan_.first_layer);
}

void WeightStreamer::before_layer(int layer) {
  if (!plan_.offloaded(layer)) return;
  if (issued_ != layer) issue(layer);  // not prefetched (no begin_layers): copy it now
  CUDA_CHECK(cudaStreamWaitEvent(main_, ready_[slot_of(layer)], 0));
  if (plan_.offloaded(layer + 1)) issue(layer + 1);
}

WeightOffloadStats WeightStreamer::stats() const {
  WeightOffloadStats s;
  s.layers = plan_.num_layers();
  s.host_bytes = host_bytes_;
  s.staging_bytes = static_cast<int64_t>(capacity_) * plan_.staging_slots();
  s.resident_bytes = resident_bytes_;
  return s;
}

}  // namespace cypris
