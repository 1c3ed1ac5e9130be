// The fp8 KV cache's scales: where each layer's K/V scales come from (vLLM's order): scale tensors in
// the checkpoint, else the --quantization-param-path JSON, else 1.0. (The --kv-cache-dtype names are
// parsed in engine/config/kv_cache_dtype.h.)
#pragma once

#include <string>
#include <vector>

#include "engine/common/dtype.h"
#include "engine/backend/backend.h"  // KvCacheScales

namespace cypris {

class WeightSource;

struct ResolvedKvScales {
  std::vector<KvCacheScales> layers;  // one per layer
  std::string source;                 // for the load log: "checkpoint", "<path>", "default 1.0"
};

// Scales of one tensor-parallel rank for an fp8 cache. checkpoint: the rank's weights, or null (dummy
// weights have no scales). Checkpoint tensors model.layers.N.self_attn.{k,v}_scale (or
// ...self_attn.attn.{k,v}_scale), a layer without them getting 1.0; else param_path (vLLM's format,
// one factor per layer used for K and V, outer key the TP rank); else 1.0 everywhere.
// Throws Error naming the file and field for bad JSON, a missing rank or layer, or a scale that is
// not a positive finite number.
ResolvedKvScales resolve_kv_cache_scales(DType cache_dtype, const WeightSource* checkpoint,
                                         const std::string& param_path, int num_layers, int tp_rank);

// Reads the --quantization-param-path JSON alone (see resolve_kv_cache_scales).
std::vector<KvCacheScales> load_kv_scales_json(const std::string& path, DType cache_dtype, int num_layers, int tp_rank);

}  // namespace cypris
