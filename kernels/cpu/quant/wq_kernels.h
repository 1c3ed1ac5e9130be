// CPU kernels of the repacked checkpoint types W4G32, W4G64, W4G128, W8G32, W8G128 (GPTQ, AWQ:
// kernels/common/wq_blocks.h): the decode into the common form of the quantized kernels, and the
// AVX2 dot products that quant_dot.h's tables hand out for them (on AVX-512 CPUs too: the kernels
// are bound by the weight bytes, and the AVX2 ones read them once for up to four activation rows).
#pragma once

#include "engine/common/dtype.h"
#include "kernels/cpu/quant/quant_dot.h"
#include "kernels/cpu/quant/quant_ref.h"

namespace cypris::quant {

// True for W4G32, W4G64, W4G128, W8G32, W8G128.
bool is_wq(DType t);
// Elements per block of a W type (32, 64 or 128); 0 for any other type.
int wq_block_elems(DType t);
// Decodes one block into the common form: q as stored (4-bit: 0..15; 8-bit: q - 128), d and dmin
// the block scale, scale[g] = 1, min[g] = the zero point (8-bit: z - 128).
void unpack_wq_block(DType t, const void* block, QuantUnpacked& u);

// The AVX2 dots of a W type (nullptr off x86 or for another type).
DotFn dot_fn_wq_avx2(DType t);

}  // namespace cypris::quant
