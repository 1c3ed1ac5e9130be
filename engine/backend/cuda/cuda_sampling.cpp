// CudaBackend::sample_rows: the host arrays of one step's sampling rows go up, one sample_rows_cuda
// launch, the tokens and logprobs come back in one download (which synchronises the stream).
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/common/error.h"
#include "kernels/cuda/sampling.h"

namespace cypris {

void CudaBackend::sample_rows(const Tensor& logits, const SamplingBatch& batch, const SamplingResults& out) {
  const int32_t rows = batch.rows;
  CYPRIS_CHECK(logits.dtype == DType::F32 && logits.ndim() == 2 && logits.device == Device::Cuda,
               "GPU sampling: logits must be fp32 [rows, vocab] on the device");
  CYPRIS_CHECK(rows >= 0 && logits.shape[0] >= rows, "GPU sampling: {} logits rows for {} sampling rows",
               logits.shape[0], rows);
  if (rows == 0) return;
  const int32_t vocab = static_cast<int32_t>(logits.shape[1]);
  const size_t need = sampling_work_elements(rows, vocab);
  if (need > sampling_capacity_) {
    sampling_work_ = empty(DType::F32, {static_cast<int64_t>(need)});
    sampling_counts_ = zeros(DType::I32, {static_cast<int64_t>(need)});
    sampling_capacity_ = need;
  }
  // Inputs: the params as raw bytes (a POD), the CSR lists when present.
  SamplingBatch b = batch;
  b.logits = static_cast<const float*>(logits.data);
  b.ld = row_stride(logits);
  b.vocab = vocab;
  const DeviceTensor params =
      upload(batch.params, DType::U8, {static_cast<int64_t>(rows * sizeof(SamplingRowParams))});
  b.params = static_cast<const SamplingRowParams*>(params.view.data);
  DeviceTensor hist_off, hist_ids, bias_off, bias_ids, bias_vals;
  auto up_i32 = [&](const int32_t* p, int64_t n, DeviceTensor& keep) {
    keep = upload(p, DType::I32, {n});
    return static_cast<const int32_t*>(keep.view.data);
  };
  if (batch.hist_offsets) {
    const int64_t n = batch.hist_offsets[rows];
    b.hist_offsets = up_i32(batch.hist_offsets, rows + 1, hist_off);
    b.hist_ids = n > 0 ? up_i32(batch.hist_ids, n, hist_ids) : nullptr;
  }
  if (batch.bias_offsets) {
    const int64_t n = batch.bias_offsets[rows];
    b.bias_offsets = up_i32(batch.bias_offsets, rows + 1, bias_off);
    b.bias_ids = n > 0 ? up_i32(batch.bias_ids, n, bias_ids) : nullptr;
    if (n > 0) {
      bias_vals = upload(batch.bias_values, DType::F32, {n});
      b.bias_values = static_cast<const float*>(bias_vals.view.data);
    } else {
      b.bias_values = nullptr;
    }
  }
  // Outputs in one device buffer: tokens, ranks, logprobs, top ids, top logprobs (all 4 bytes).
  const int64_t top = static_cast<int64_t>(rows) * batch.max_top;
  const DeviceTensor res = empty(DType::I32, {3 * static_cast<int64_t>(rows) + 2 * top});
  auto* base = static_cast<int32_t*>(res.view.data);
  SamplingResults r;
  r.tokens = base;
  r.ranks = base + rows;
  r.logprobs = reinterpret_cast<float*>(base + 2 * rows);
  r.top_ids = top ? base + 3 * rows : nullptr;
  r.top_logprobs = top ? reinterpret_cast<float*>(base + 3 * rows + top) : nullptr;
  sample_rows_cuda(b, r, static_cast<float*>(sampling_work_.view.data),
                   static_cast<int32_t*>(sampling_counts_.view.data), static_cast<cudaStream_t>(stream()));
  std::vector<int32_t> host(static_cast<size_t>(3 * rows + 2 * top));
  download(res.view, host.data());
  std::memcpy(out.tokens, host.data(), sizeof(int32_t) * rows);
  if (out.ranks) std::memcpy(out.ranks, host.data() + rows, sizeof(int32_t) * rows);
  if (out.logprobs) std::memcpy(out.logprobs, host.data() + 2 * rows, sizeof(float) * rows);
  if (top) {
    std::memcpy(out.top_ids, host.data() + 3 * rows, sizeof(int32_t) * top);
    std::memcpy(out.top_logprobs, host.data() + 3 * rows + top, sizeof(float) * top);
  }
}

}  // namespace cypris
