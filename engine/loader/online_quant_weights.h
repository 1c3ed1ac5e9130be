// Online quantization of a 16-bit checkpoint at load time, as Aphrodite's flags ask for it:
// `-q fp8` (FP8 e4m3 weights with one scale per output channel), `--load-in-8bit` (int8 per output
// channel) and `--load-in-4bit` (4 bits per group of 128 or 32 input columns). Every linear layer
// (a 2-D `.weight` that is not an embedding, lm_head or a MoE router) is offered to the model in the
// block type of kernels/cpu/quant/online_quant.h and quantized as it is read, whole rows at a time,
// so that tensor-parallel ranks get the same scales as one rank.
#pragma once

#include <memory>

#include "engine/loader/weights.h"
#include "kernels/cpu/quant/online_quant.h"

namespace cypris {

std::unique_ptr<WeightSource> make_online_quant_source(std::unique_ptr<WeightSource> plain, quant::OnlineQuant mode);

// What the options ask for: nullopt for nothing; an Error for a combination that makes no sense (a
// checkpoint that is already quantized, both --load-in flags). `checkpoint_quantized` names the
// checkpoint's method ("" when it has none).
std::optional<quant::OnlineQuant> online_quant_mode(const LoadOptions& options, const std::string& checkpoint_method,
                                                    const std::string& model);

}  // namespace cypris
