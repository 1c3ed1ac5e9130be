// The bytes each decoder layer's weights take on one tensor-parallel rank, estimated before the
// weights are loaded (for --cpu-offload-gb's plan, weight_offload_plan.h): the layer's shapes from
// config.json (q/k/v/o, the MLP or every expert of a MoE layer, norms and biases) with each linear
// weight at the type it will be kept in — the checkpoint's block-quantized type when it has one
// (GGUF, GPTQ/AWQ blocks; the CUDA backend keeps them all), else the weight dtype — and norms and
// biases in fp32. An estimate: the backend keeps whatever does not fit a staging slot resident.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/common/dtype.h"
#include "engine/loader/model_config.h"
#include "engine/loader/weights.h"

namespace cypris {

// Layers [first_layer, end_layer) of the model, at tensor-parallel size tp (each rank its share).
std::vector<int64_t> estimate_layer_weight_bytes(const ModelConfig& cfg, const WeightSource& weights,
                                                 DType weight_dtype, int tp, int first_layer, int end_layer);

}  // namespace cypris
