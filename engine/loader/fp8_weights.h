// The weight source of an FP8 checkpoint (quant_method fp8, or compressed-tensors float-quantized):
// every linear layer stored as an F8_E4M3 `weight` with its scales (`weight_scale`: per tensor or
// per output channel; `weight_scale_inv`: one per block of rows x columns, as DeepSeek-V3 and
// Qwen3-FP8 ship) is offered to the model as F8G128 (kernels/common/fp8_blocks.h), so it stays in
// 8 bits in memory; read in a plain dtype it is dequantized exactly (fp8 * scale in fp32). The same
// source reads compressed-tensors int-quantized (W8A8) checkpoints: I8 weights with tensor or
// channel scales (and zero points) become W8G128 / W8G32 blocks (kernels/common/wq_blocks.h). Layers
// the checkpoint keeps in 16 bits (its ignore list, lm_head) come from the plain source.
#pragma once

#include <filesystem>
#include <memory>

#include "engine/loader/quant_config.h"
#include "engine/loader/weights.h"

namespace cypris {

std::unique_ptr<WeightSource> make_fp8_weight_source(const std::filesystem::path& dir, const QuantConfig& q,
                                                     std::unique_ptr<WeightSource> plain);

}  // namespace cypris
