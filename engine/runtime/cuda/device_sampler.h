// DeviceSampler: runs the GPU sampler (kernels/cuda/sampling.h) on logits that stay on a CUDA
// backend's device: uploads one step's GpuSamplingInputs, launches, downloads the tokens and
// logprobs. Owns the sampler's scratch (processed logits and the penalty counts), grown as needed.
// Only compiled with CUDA; no CUDA headers here.
#pragma once

#include "engine/backend/backend.h"
#include "engine/sampling/gpu_sampling.h"

namespace cypris {

class CudaBackend;

class DeviceSampler {
 public:
  explicit DeviceSampler(CudaBackend& backend) : backend_(backend) {}

  // logits: [rows, vocab] fp32 on the backend's device (rows >= in.rows(); the first in.rows() are sampled).
  GpuSamplingOutputs run(const Tensor& logits, const GpuSamplingInputs& in);

 private:
  CudaBackend& backend_;
  DeviceTensor work_;    // F32 [capacity]
  DeviceTensor counts_;  // I32 [capacity], all zero between calls
  size_t capacity_ = 0;
};

}  // namespace cypris
