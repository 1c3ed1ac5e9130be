// Quantized dot-product kernels: the per-ISA variants of the scalar reference dot_ref
// (quant_ref.h) and of the activation quantization, and the run-time choice between them.
//
// Every variant computes, per weight block, the same integer sums as the reference; they differ
// from it only in the order in which the per-block float results are added (and, in the fully
// vectorised kernels, in applying the block scales to partial sums in float lanes), so they agree
// with it to float-sum-order rounding. The SIMD variants are compiled with target attributes and
// chosen with __builtin_cpu_supports, so the build needs no -march flag.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"
#include "kernels/cpu/quant/quant_ref.h"

namespace cypris::quant {

enum class Isa { Scalar, Avx2, Avx512 };  // Avx512 = F, BW, VL and VNNI

// The best ISA this CPU has.
Isa best_isa();
// True when the CPU can run that ISA's kernels.
bool isa_available(Isa isa);
const char* isa_name(Isa isa);

// Dot of one quantized weight row (k elements) with one quantized activation row.
using DotFn = float (*)(const void* w_row, const ActRow& a, int64_t k);
// Activation quantization (same output as quantize_acts_ref, bit for bit).
using QuantizeFn = void (*)(const float* x, int64_t k, int block, int8_t* qs, float* d, int16_t* bsum);

DotFn dot_fn(DType t, Isa isa);
QuantizeFn quantize_fn(Isa isa);

// Per-ISA tables, defined in quant_dot_avx2.cpp / quant_dot_avx512.cpp (null off x86).
DotFn dot_fn_avx2(DType t);
DotFn dot_fn_avx512(DType t);
void quantize_acts_avx2(const float* x, int64_t k, int block, int8_t* qs, float* d, int16_t* bsum);

}  // namespace cypris::quant
