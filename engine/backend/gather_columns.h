// The activation gather of a linear layer kept quantized with its input columns reordered
// (act-order GPTQ, EXL2: the checkpoint's groups made contiguous at load, so the W4/W8 block
// kernels apply): out[t, j] = x[t, cols[j]], on the backend's device.
//
// A free function over Backend rather than a Backend virtual: it needs only the device, the
// stream and a copy kernel, and backend.h is included by most of the tree (adding a virtual there
// rebuilds it all). CPU: kernels/cpu/gather_columns.h; CUDA: kernels/cuda/gather_columns.h.
#pragma once

#include "engine/backend/backend.h"

namespace cypris {

// x [T, K] (the activation dtype, or fp32; may be a column slice), cols I32 [n] on the backend's
// device with values in [0, K), out [T, n] of x's dtype (may be a column slice).
void gather_columns(Backend& b, const Tensor& x, const Tensor& cols, Tensor& out);

}  // namespace cypris
