// The weight source of a GPTQ or AWQ checkpoint: every linear layer stored as qweight / qzeros /
// scales (/ g_idx) is offered to the model under its plain name (`...q_proj.weight`) with a
// repacked block type as its native dtype (W4G32, W4G128, W8G32, W8G128; kernels/common/wq_blocks.h),
// so that WeightLoader keeps it quantized; read in a plain dtype it is dequantized exactly. The
// other tensors (embeddings, norms, lm_head) come from the plain checkpoint source.
#pragma once

#include <filesystem>
#include <memory>

#include "engine/loader/quant_config.h"
#include "engine/loader/weights.h"

namespace cypris {

std::unique_ptr<WeightSource> make_quantized_weight_source(const std::filesystem::path& dir, const QuantConfig& q,
                                                           std::unique_ptr<WeightSource> plain);

}  // namespace cypris
