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

// What one pipeline stage hands the next: the residual stream after its last layer, and the
// hidden state of that layer not yet added into it (a family whose layers add their own branches
// ignores it). Each [num_tokens, hidden] in the producing backend's activation dtype.
struct StageHandoff {
  DeviceTensor hidden;
  DeviceTensor residual;
};

// The batch on the backend's device.
struct ForwardInputs {
  Tensor token_ids;       // I32 [num_tokens]
  Tensor positions;       // I32 [num_tokens]
  Tensor logits_indices;  // I32 [num_logits]
  AttentionMetadata attn;
  // Pipeline stages (ModelBuildOptions::first_layer / last_layer): a stage after the first reads
  // its input from stage_in instead of embedding token_ids; a stage before the last writes its
  // output into stage_out and returns no logits.
  const StageHandoff* stage_in = nullptr;
  StageHandoff* stage_out = nullptr;
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
  // Pipeline stage: this model holds and runs decoder layers [first_layer, last_layer) only
  // (last_layer -1: to the end); the first stage also the embedding, the last the final norm and
  // LM head (and the embedding when the head is tied to it).
  int first_layer = 0;
  int last_layer = -1;
  // --enable-lora: the linear layers register their LoRA sites here (models/layers/lora.h); must
  // outlive the model. Null: no LoRA.
  LoraSites* lora = nullptr;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int num_layers() const = 0;  // decoder layers this model holds (its pipeline stage's)
  virtual int num_kv_heads() const = 0;  // on this rank
  virtual int head_dim() const = 0;
  // False when a forward pass reads device data on the host (the mixture-of-experts router routes on
  // the CPU), which a CUDA graph cannot capture: such a model always runs eagerly.
  virtual bool graph_capturable() const { return true; }
  // Returns logits F32 [num_logits, vocab]; a stage before the last fills in.stage_out and returns
  // an empty tensor. kv_cache holds one entry per layer of this model (num_layers()).
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
