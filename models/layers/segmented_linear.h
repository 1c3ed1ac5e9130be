// The product of a linear layer kept quantized over reordered input columns (act-order GPTQ, EXL2;
// WeightLoader::load_linear_segments): each segment gathers its input columns from x and multiplies
// them by its W4/W8 blocks, and the segments' products are summed.
#pragma once

#include <vector>

#include "models/layers/weight_loader.h"

namespace cypris {

// out [T, rows] = Σ_s x[:, columns_s] · W_sᵀ (+ bias); x [T, in] in the model's column order, out
// may be a column slice. Segments after the first add through a scratch product (Backend::add).
void segmented_linear(Backend& b, const std::vector<LinearSegment>& segments, const Tensor& x, const Tensor* bias,
                      Tensor& out);

}  // namespace cypris
