// The weight source of a bitsandbytes 4-bit checkpoint (quant_method bitsandbytes, load_in_4bit):
// every linear layer stored as bitsandbytes' Params4bit — `weight` (uint8, two 4-bit codes per byte,
// element 2i in the high nibble of byte i, over the flattened [out, in] weight), `weight.absmax`
// (fp32 per block, or uint8 codes of the nested quantization with `weight.nested_absmax`,
// `weight.nested_quant_map` and the JSON's nested_offset), `weight.quant_map` (the 16-value table)
// and `weight.quant_state.bitsandbytes__nf4|fp4` (uint8 bytes of a JSON object: quant_type, blocksize,
// shape, dtype, nested_blocksize, nested_offset) — is offered to the model as NF4G64 / FP4G64
// (kernels/common/bnb_blocks.h), so it stays in 4 bits in memory; read in a plain dtype it is
// dequantized exactly (table[q] * absmax in fp32). Layers the checkpoint keeps in 16 bits
// (llm_int8_skip_modules, lm_head) come from the plain source. 8-bit (LLM.int8) checkpoints: `weight`
// int8 [out, in] and `SCB` fp32 [out] (w = q * SCB / 127) are offered as W8G128 / W8G32 blocks
// (kernels/common/wq_blocks.h) with the row scale SCB / 127 rounded to fp16, or read dequantized as
// bitsandbytes computes them.
#pragma once

#include <filesystem>
#include <memory>

#include "engine/loader/quant_config.h"
#include "engine/loader/weights.h"

namespace cypris {

std::unique_ptr<WeightSource> make_bnb_weight_source(const std::filesystem::path& dir, const QuantConfig& q,
                                                     std::unique_ptr<WeightSource> plain);

}  // namespace cypris
