// Run-time choice of the quantized kernels (see quant_dot.h).
#include "kernels/cpu/quant/quant_dot.h"

namespace cypris::quant {

bool isa_available(Isa isa) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                             __builtin_cpu_supports("avx512vnni");
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return avx2;
    case Isa::Avx512: return avx512;
  }
  return false;
#else
  return isa == Isa::Scalar;
#endif
}

Isa best_isa() {
  static const Isa best = isa_available(Isa::Avx512) ? Isa::Avx512 : isa_available(Isa::Avx2) ? Isa::Avx2 : Isa::Scalar;
  return best;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

namespace {
template <DType T>
float dot_ref_of(const void* w_row, const ActRow& a, int64_t k) {
  return dot_ref(T, w_row, a, k);
}

DotFn dot_fn_scalar(DType t) {
  switch (t) {
    case DType::Q4_0: return rows_of<dot_ref_of<DType::Q4_0>>;
    case DType::Q4_1: return rows_of<dot_ref_of<DType::Q4_1>>;
    case DType::Q5_0: return rows_of<dot_ref_of<DType::Q5_0>>;
    case DType::Q5_1: return rows_of<dot_ref_of<DType::Q5_1>>;
    case DType::Q8_0: return rows_of<dot_ref_of<DType::Q8_0>>;
    case DType::Q2_K: return rows_of<dot_ref_of<DType::Q2_K>>;
    case DType::Q3_K: return rows_of<dot_ref_of<DType::Q3_K>>;
    case DType::Q4_K: return rows_of<dot_ref_of<DType::Q4_K>>;
    case DType::Q5_K: return rows_of<dot_ref_of<DType::Q5_K>>;
    case DType::Q6_K: return rows_of<dot_ref_of<DType::Q6_K>>;
    case DType::IQ4_NL: return rows_of<dot_ref_of<DType::IQ4_NL>>;
    case DType::IQ4_XS: return rows_of<dot_ref_of<DType::IQ4_XS>>;
    case DType::W4G32: return rows_of<dot_ref_of<DType::W4G32>>;
    case DType::W4G64: return rows_of<dot_ref_of<DType::W4G64>>;
    case DType::W4G128: return rows_of<dot_ref_of<DType::W4G128>>;
    case DType::W8G32: return rows_of<dot_ref_of<DType::W8G32>>;
    case DType::W8G128: return rows_of<dot_ref_of<DType::W8G128>>;
    default: return nullptr;
  }
}
}  // namespace

DotFn dot_fn(DType t, Isa isa) {
  switch (isa) {
    case Isa::Avx512: return isa_available(isa) ? dot_fn_avx512(t) : nullptr;
    case Isa::Avx2: return isa_available(isa) ? dot_fn_avx2(t) : nullptr;
    case Isa::Scalar: return dot_fn_scalar(t);
  }
  return nullptr;
}

QuantizeFn quantize_fn(Isa isa) {
  // The AVX2 quantizer serves AVX-512 CPUs too: it is a small part of a matmul's time.
  if (isa != Isa::Scalar && isa_available(Isa::Avx2)) return quantize_acts_avx2;
  return quantize_acts_ref;
}

}  // namespace cypris::quant
