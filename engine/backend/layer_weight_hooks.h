// A capability a backend may have beside the Backend ops: knowing which decoder layer's weights it
// is given and which layer runs next. The CUDA backend has it for --cpu-offload-gb
// (weight_offload_plan.h): an offloaded layer's weights go to pinned host memory when they are
// loaded, and each forward pass copies them into a staging slot on the GPU before the layer runs.
// The models call it through layer_weight_hooks(backend) (null for a backend without it, the CPU),
// so the Backend interface and the runtime need not know about it.
#pragma once

#include <cstdint>

#include "engine/backend/backend.h"

namespace cypris {

// What a backend did with --cpu-offload-gb once the weights are loaded.
struct WeightOffloadStats {
  int layers = 0;                  // decoder layers whose weights are streamed
  int64_t host_bytes = 0;          // their weights, in pinned host memory
  int64_t staging_bytes = 0;       // the staging slots on the GPU
  int64_t resident_bytes = 0;      // weights of offloaded layers that did not fit their slot (kept on the GPU)
};

class LayerWeightHooks {
 public:
  virtual ~LayerWeightHooks() = default;
  // Loading: the weights uploaded from now on (upload_weight, dummy_weight) belong to decoder layer
  // `layer` of the whole model; -1: to no layer (embedding, final norm, LM head).
  virtual void weights_of_layer(int layer) = 0;
  // A forward pass: begin_layers() before its first decoder layer, before_layer(i) right before the
  // ops of layer i are queued. Whatever layer i reads is in place (on the device's stream) once
  // before_layer(i) returns.
  virtual void begin_layers() = 0;
  virtual void before_layer(int layer) = 0;
  virtual WeightOffloadStats weight_offload_stats() const = 0;
};

// The backend's hooks, or null when it has none.
inline LayerWeightHooks* layer_weight_hooks(Backend& backend) { return dynamic_cast<LayerWeightHooks*>(&backend); }

}  // namespace cypris
