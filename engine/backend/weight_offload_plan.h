// --cpu-offload-gb (Aphrodite's and vLLM's flag): N GiB of one GPU's weights are kept in pinned host
// memory and streamed to the GPU each time they are used, a virtual way to give the card N GiB more.
// This file is the plan, pure arithmetic: which decoder layers are offloaded and how big the staging
// area on the GPU is. The streaming itself is the CUDA backend's (layer_weight_hooks.h).
//
// The unit is a whole decoder layer (every weight of it: projections, norms, biases), taken from the
// GPU's last layer backwards until the offloaded bytes reach N GiB (all of the GPU's layers when the
// model has fewer). vLLM offloads parameter by parameter in model order; whole layers at the end
// are chosen here because
//  - one copy per layer is the unit the GPU waits for: layer i + 1 is copied while layer i computes,
//    into the other of two staging slots (double buffering), so a slot holds one layer;
//  - the offloaded layers form one run at the end, so the copy of the first of them starts when the
//    forward pass starts and overlaps every resident layer's compute (the first layers would have
//    nothing to hide their copy behind but the embedding).
// The staging slots are sized from an estimate of each layer's bytes (the layer's shapes and stored
// types); the CUDA backend keeps any weight that does not fit its slot resident on the GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cypris {

struct WeightOffloadPlan {
  // Offloaded decoder layers [first_layer, end_layer) of the whole model; empty: none.
  int first_layer = 0;
  int end_layer = 0;
  int64_t offloaded_bytes = 0;  // the offloaded layers' weights (estimated)
  int64_t slot_bytes = 0;       // the largest offloaded layer (estimated)

  int num_layers() const { return end_layer - first_layer; }
  bool empty() const { return num_layers() <= 0; }
  bool offloaded(int layer) const { return layer >= first_layer && layer < end_layer; }
  // Two slots take turns (the copy of layer i + 1 beside the compute of layer i); one offloaded
  // layer needs one.
  int staging_slots() const { return num_layers() >= 2 ? 2 : num_layers() > 0 ? 1 : 0; }
  // A slot's room on the GPU: the estimate plus 1/16 and 64 KiB for alignment and estimate error.
  int64_t slot_capacity() const { return empty() ? 0 : slot_bytes + slot_bytes / 16 + (int64_t{64} << 10); }
  int64_t staging_bytes() const { return staging_slots() * slot_capacity(); }
  // What the GPU holds less than without offloading (may be negative for a small N: the staging
  // slots then cost more than the offloaded layers free).
  int64_t gpu_bytes_saved() const { return offloaded_bytes - staging_bytes(); }
};

// The plan for one GPU holding decoder layers [first_layer, first_layer + layer_bytes.size()), where
// layer_bytes[k] are the bytes layer first_layer + k's weights take on it: the fewest last layers
// whose bytes reach gib GiB. gib 0: no offloading. Throws Error naming --cpu-offload-gb for a negative
// or non-finite gib.
WeightOffloadPlan plan_weight_offload(double gib, const std::vector<int64_t>& layer_bytes, int first_layer = 0);

// The load log's line: "--cpu-offload-gb 4: layers 20..31 (12 of 32), 4.1 GiB of weights in pinned
// host memory, streamed to the GPU each step; 0.7 GiB of staging on the GPU".
std::string describe_weight_offload(double gib, const WeightOffloadPlan& plan, int gpu_layers);

}  // namespace cypris
