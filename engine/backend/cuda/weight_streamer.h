// --cpu-offload-gb on the CUDA backend: the weights of the plan's decoder layers
// (weight_offload_plan.h) live in pinned host memory (cudaHostAlloc); their tensors point into a
// staging slot on the GPU, and each forward pass copies a layer's bytes into its slot before the
// layer runs. Two slots take turns: while layer i computes out of one on the backend's stream, layer
// i + 1 is copied into the other on a copy stream; events order the copy after the last reader of the
// slot (layer i - 1) and the layer's kernels after its copy. The copy of the first offloaded layer
// is queued when the forward pass begins, so it overlaps the resident layers.
//
// Everything is queued on streams with events and memcpy from pinned memory, which CUDA graph
// capture records (a fork of the copy stream off the captured stream, joined back by the waits), so
// the decode graphs replay the copies too. A weight is bytes to this class, so GGUF blocks, GPTQ /
// AWQ / FP8 blocks and 16-bit weights stream alike.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/layer_weight_hooks.h"
#include "engine/backend/weight_offload_plan.h"

namespace cypris {

class WeightStreamer {
 public:
  // Allocates the staging slots on `device` (current) and the copy stream; `stream` is the stream
  // the layers' kernels run on.
  WeightStreamer(const WeightOffloadPlan& plan, int device, cudaStream_t stream);
  ~WeightStreamer();
  WeightStreamer(const WeightStreamer&) = delete;
  WeightStreamer& operator=(const WeightStreamer&) = delete;

  void set_loading_layer(int layer) { loading_ = layer; }
  // Whether the weights uploaded now belong to an offloaded layer.
  bool loading_offloaded() const { return plan_.offloaded(loading_); }
  // An offloaded layer's weight: its bytes copied into pinned host memory, the returned tensor's data
  // in the layer's staging slot (the tensor owns the pinned memory). nullopt, with `host` untouched,
  // when the slot has no room left (the plan's estimate was short): the caller keeps it on the GPU.
  std::optional<DeviceTensor> place(const HostTensor& host);

  void begin_layers();
  void before_layer(int layer);
  WeightOffloadStats stats() const;

 private:
  struct Copy {
    void* dst = nullptr;
    std::shared_ptr<void> src;  // pinned
    size_t bytes = 0;
  };
  int slot_of(int layer) const { return (layer - plan_.first_layer) % 2; }
  char* slot_data(int slot) const { return static_cast<char*>(slots_) + static_cast<size_t>(slot) * capacity_; }
  // Queues layer's copies on the copy stream, after all work queued on the main stream so far.
  void issue(int layer);

  WeightOffloadPlan plan_;
  int device_ = 0;
  size_t capacity_ = 0;  // bytes per slot
  cudaStream_t main_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t ready_[2] = {nullptr, nullptr};  // the copy into slot s is done
  cudaEvent_t free_ = nullptr;                 // the main stream's work so far is done
  void* slots_ = nullptr;
  std::vector<std::vector<Copy>> copies_;  // per offloaded layer, in upload order
  std::vector<size_t> used_;               // per offloaded layer: bytes of its slot in use
  int loading_ = -1;
  int issued_ = -1;  // the last layer whose copy was queued in this forward pass
  int64_t host_bytes_ = 0;
  int64_t resident_bytes_ = 0;
};

}  // namespace cypris
