// The interface every model implementation provides to the ModelRunner: a forward pass over one
// flattened batch that writes K/V into the paged cache and returns logits for selected rows.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/loader/model_config.h"
#include "engine/backend/backend.h"

namespace cypris {

class Communicator;
class LoraSites;

// One layer's cache: K and V, each [num_blocks, block_size, num_kv_heads (this rank), head_dim],
// F32 or fp8 (F8E4M3 / F8E5M2) with the layer's scales.
struct KvCacheLayer {
  DeviceTensor k;
  DeviceTensor v;
  KvCacheScales scales;
};

// The batch on the backend's device.
struct ForwardInputs {
  Tensor token_ids;       // I32 [num_tokens]
  Tensor positions;       // I32 [num_tokens]
  Tensor logits_indices;  // I32 [num_logits]
  AttentionMetadata attn;
  // I32 [num_tokens]: each token's LoRA adapter slot (-1: the base model); empty when the batch
  // uses no adapter. A device tensor, so a captured graph replays it.
  Tensor lora_slots;
};

// Called with each named intermediate ("embed", "layers.3.q_rot", "logits", ...) when set, so a
// debug dump can be compared layer by layer with a reference implementation.
using DebugHook = std::function<void(const std::string& name, const Tensor& value)>;

// A layer's view of the debug hook: names it dumps get the layer's prefix ("layers.3.").
struct Dumper {
  const DebugHook* hook = nullptr;
  std::string prefix;
  void operator()(const std::string& name, const Tensor& value) const {
    if (hook && *hook) (*hook)(prefix + name, value);
  }
  Dumper sub(const std::string& more) const { return {hook, prefix + more}; }
};

struct ParallelConfig {
  int rank = 0;
  int world_size = 1;
};

struct ModelBuildOptions {
  DType weight_dtype = DType::F16;  // linear layers and embeddings; norms and biases are kept in fp32
  ParallelConfig parallel;
  // Joins this rank to the others (all-reduce after row-parallel layers, vocab-parallel
  // embedding and LM head). Required when parallel.world_size > 1; must outlive the model.
  Communicator* comm = nullptr;
  // --enable-lora: the linear layers register their LoRA sites here (models/layers/lora.h); must
  // outlive the model. Null: no LoRA.
  LoraSites* lora = nullptr;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int num_layers() const = 0;
  virtual int num_kv_heads() const = 0;  // on this rank
  virtual int head_dim() const = 0;
  // False when a forward pass reads device data on the host (the mixture-of-experts router routes on
  // the CPU), which a CUDA graph cannot capture: such a model always runs eagerly.
  virtual bool graph_capturable() const { return true; }
  // Returns logits F32 [num_logits, vocab].
  virtual DeviceTensor forward(const ForwardInputs& in, std::vector<KvCacheLayer>& kv_cache) = 0;
  void set_debug_hook(DebugHook hook) { hook_ = std::move(hook); }

 protected:
  void dump(const std::string& name, const Tensor& t) const {
    if (hook_) hook_(name, t);
  }
  Dumper dumper(const std::string& prefix = "") const { return {&hook_, prefix}; }
  DebugHook hook_;
};

}  // namespace cypris
