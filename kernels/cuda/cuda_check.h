// CUDA_CHECK for the CUDA backend and its kernels: a failed runtime call becomes a cypris::Error
// naming the expression, the function, file and line, and CUDA's own message.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "engine/common/error.h"

namespace cypris {

[[noreturn]] inline void cuda_fail(const char* expr, const char* func, const char* file, int line, cudaError_t err) {
  throw Error(std::string("CUDA error: ") + expr + " in " + func + " (" + file + ":" + std::to_string(line) +
              "): " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

}  // namespace cypris

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t cuda_check_err_ = (expr);                                           \
    if (cuda_check_err_ != cudaSuccess) {                                                 \
      ::cypris::cuda_fail(#expr, __func__, __FILE__, __LINE__, cuda_check_err_);          \
    }                                                                                     \
  } while (0)
