// Launcher for LayerNorm over whole rows on the GPU (Cohere's norms). Activations F32, F16 or BF16
// (`dtype`), weight and bias fp32, arithmetic fp32. CPU reference: layer_norm_cpu (kernels/cpu/ops.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// out = (x - mean) / sqrt(var + eps) * weight (+ bias; null: none), per row of `hidden` contiguous
// elements; out may alias x.
void layer_norm_cuda(const void* x, DType dtype, const float* weight, const float* bias, float eps, int64_t rows,
                     int64_t hidden, void* out, cudaStream_t stream);

}  // namespace cypris
