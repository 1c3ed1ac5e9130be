// DeviceSampler: uploads, one launch, downloads (the download synchronises the stream).
#include "engine/runtime/cuda/device_sampler.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "engine/common/error.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "kernels/cuda/sampling.h"

namespace cypris {
namespace {

template <typename T>
DeviceTensor upload_vec(CudaBackend& be, const std::vector<T>& v, DType dtype) {
  return be.upload(v.data(), dtype, {static_cast<int64_t>(v.size())});
}

}  // namespace

GpuSamplingOutputs DeviceSampler::run(const Tensor& logits, const GpuSamplingInputs& in) {
  const int32_t rows = in.rows();
  CYPRIS_CHECK(logits.dtype == DType::F32 && logits.ndim() == 2 && logits.device == Device::Cuda,
               "GPU sampling: logits must be fp32 [rows, vocab] on the device");
  CYPRIS_CHECK(logits.shape[0] >= rows, "GPU sampling: {} logits rows for {} sampling rows", logits.shape[0], rows);
  const int32_t vocab = static_cast<int32_t>(logits.shape[1]);
  GpuSamplingOutputs out;
  out.resize(rows, in.max_top);
  if (rows == 0) return out;
  const size_t need = sampling_work_elements(rows, vocab);
  if (need > capacity_) {
    work_ = backend_.empty(DType::F32, {static_cast<int64_t>(need)});
    counts_ = backend_.zeros(DType::I32, {static_cast<int64_t>(need)});
    capacity_ = need;
  }
  // Inputs: the params as raw bytes (a POD), the CSR lists when present.
  DeviceTensor params = backend_.upload(in.params.data(), DType::U8,
                                        {static_cast<int64_t>(in.params.size() * sizeof(SamplingRowParams))});
  DeviceTensor hist_off, hist_ids, bias_off, bias_ids, bias_vals;
  SamplingBatch b;
  b.logits = static_cast<const float*>(logits.data);
  b.ld = row_stride(logits);
  b.rows = rows;
  b.vocab = vocab;
  b.params = static_cast<const SamplingRowParams*>(params.view.data);
  if (!in.hist_offsets.empty()) {
    hist_off = upload_vec(backend_, in.hist_offsets, DType::I32);
    hist_ids = upload_vec(backend_, in.hist_ids, DType::I32);
    b.hist_offsets = static_cast<const int32_t*>(hist_off.view.data);
    b.hist_ids = static_cast<const int32_t*>(hist_ids.view.data);
  }
  if (!in.bias_offsets.empty()) {
    bias_off = upload_vec(backend_, in.bias_offsets, DType::I32);
    bias_ids = upload_vec(backend_, in.bias_ids, DType::I32);
    bias_vals = upload_vec(backend_, in.bias_values, DType::F32);
    b.bias_offsets = static_cast<const int32_t*>(bias_off.view.data);
    b.bias_ids = static_cast<const int32_t*>(bias_ids.view.data);
    b.bias_values = static_cast<const float*>(bias_vals.view.data);
  }
  b.max_top = in.max_top;
  // Outputs in one device buffer: tokens, ranks, logprobs, top ids, top logprobs (all 4 bytes).
  const int64_t top = static_cast<int64_t>(rows) * in.max_top;
  DeviceTensor res = backend_.empty(DType::I32, {3 * static_cast<int64_t>(rows) + 2 * top});
  auto* base = static_cast<int32_t*>(res.view.data);
  SamplingResults r;
  r.tokens = base;
  r.ranks = base + rows;
  r.logprobs = reinterpret_cast<float*>(base + 2 * rows);
  r.top_ids = top ? base + 3 * rows : nullptr;
  r.top_logprobs = top ? reinterpret_cast<float*>(base + 3 * rows + top) : nullptr;
  sample_rows_cuda(b, r, static_cast<float*>(work_.view.data), static_cast<int32_t*>(counts_.view.data),
                   static_cast<cudaStream_t>(backend_.stream()));
  std::vector<int32_t> host(static_cast<size_t>(3 * rows + 2 * top));
  backend_.download(res.view, host.data());
  std::copy(host.begin(), host.begin() + rows, out.tokens.begin());
  std::copy(host.begin() + rows, host.begin() + 2 * rows, out.ranks.begin());
  std::memcpy(out.logprobs.data(), host.data() + 2 * rows, sizeof(float) * rows);
  if (top) {
    std::copy(host.begin() + 3 * rows, host.begin() + 3 * rows + top, out.top_ids.begin());
    std::memcpy(out.top_logprobs.data(), host.data() + 3 * rows + top, sizeof(float) * top);
  }
  return out;
}

}  // namespace cypris
