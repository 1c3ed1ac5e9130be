// Choosing and creating the Backend for --device: "cpu", "cuda", or "auto" (CUDA when the build
// has it and a GPU is present, else the CPU). Callers never include a CUDA header.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/weight_offload_plan.h"

namespace cypris {

struct BackendOptions {
  std::string device = "cpu";  // auto | cuda | cpu (neuron/tpu are treated as auto)
  int threads = 0;             // CPU backend threads; <= 0: one per hardware thread
  int cuda_device = 0;
  bool cuda_fp32_gemm = false;  // see CudaBackendOptions::fp32_gemm
  // GPU activations: F32, F16 or BF16 (CudaBackendOptions::activation_dtype); the CPU is always F32.
  DType cuda_activation_dtype = DType::F32;
  // --cpu-offload-gb on a CUDA device (CudaBackendOptions::weight_offload); the CPU ignores it.
  WeightOffloadPlan weight_offload;
};

// True when this binary was built with the CUDA backend.
bool cuda_compiled();
// Usable CUDA devices: 0 without CUDA in the build, without a driver, or on any driver error.
int cuda_device_count();
// Name, total and free memory of a CUDA device (creates the device's CUDA context when the process
// has none yet); nullopt without CUDA in the build, without the device, or on any driver error.
struct CudaDeviceMemory {
  std::string name;
  size_t total_bytes = 0;
  size_t free_bytes = 0;
};
std::optional<CudaDeviceMemory> cuda_device_memory(int device);
// "cuda" or "cpu" for a --device value. Throws Error for "cuda" when the build has no CUDA or no
// GPU is present, and for unknown values.
std::string resolve_device(const std::string& device);
std::unique_ptr<Backend> make_backend(const BackendOptions& options);

}  // namespace cypris
