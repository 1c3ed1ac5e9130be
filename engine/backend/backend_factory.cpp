#include "engine/backend/backend_factory.h"

#include "engine/common/error.h"
#include "engine/backend/cpu/cpu_backend.h"
#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace cypris {

bool cuda_compiled() {
#ifdef CYPRIS_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

#ifndef CYPRIS_HAVE_CUDA
int cuda_device_count() { return 0; }
std::optional<CudaDeviceMemory> cuda_device_memory(int) { return std::nullopt; }
#endif

std::string resolve_device(const std::string& device) {
  if (device == "cpu") return "cpu";
  if (device == "cuda") {
    CYPRIS_CHECK(cuda_compiled(), "--device cuda: this build of Cypris has no CUDA backend (built with "
                                  "CYPRIS_CUDA=OFF or without nvcc); use --device cpu (or auto)");
    CYPRIS_CHECK(cuda_device_count() > 0,
                 "--device cuda: no CUDA device is available (no GPU or no driver); use --device cpu (or auto)");
    return "cuda";
  }
  CYPRIS_CHECK(device == "auto" || device == "neuron" || device == "tpu",
               "--device {}: allowed values are auto, cuda and cpu", device);
  return cuda_device_count() > 0 ? "cuda" : "cpu";
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  const std::string device = resolve_device(options.device);
#ifdef CYPRIS_HAVE_CUDA
  if (device == "cuda") {
    CudaBackendOptions co;
    co.device = options.cuda_device;
    co.fp32_gemm = options.cuda_fp32_gemm;
    co.activation_dtype = options.cuda_activation_dtype;
    co.weight_offload = options.weight_offload;
    return std::make_unique<CudaBackend>(co);
  }
#endif
  return std::make_unique<CpuBackend>(options.threads);
}

}  // namespace cypris
