// <immintrin.h> for the CPU kernels that pick their instruction set at run time. GCC 12's AVX-512
// headers build reductions from _mm256_undefined_*(), which trips -W(maybe-)uninitialized in every
// caller; the values are never read, so the warnings are off while the header is read, and only
// then. Nothing on other architectures.
#pragma once

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
