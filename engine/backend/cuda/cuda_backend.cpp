#include "engine/backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "engine/backend/backend_factory.h"
#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/backend/backend_checks.h"
#include "engine/backend/cuda/pinned_staging.h"
#include "engine/backend/cuda/weight_streamer.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/cache_ops.h"
#include "kernels/cuda/kv_shift.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dummy_fill.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/lora.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/quant/quant_gemm.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rotary.h"

namespace cypris {
namespace {

using backend_checks::require_contiguous;

// A caching allocator: a step allocates the same activation sizes every time, and cudaMalloc /
// cudaFree synchronise the device, so freed blocks wait in size-keyed lists. All work runs on one
// stream, so a block handed out again is only touched by work queued after its last use.
// The main pool reuses blocks of the exact (rounded) size. The CUDA graphs' private pool is
// best-fit (a block up to twice the request), so the smaller graphs, captured after the largest,
// run in the largest one's memory instead of each keeping their own. It never frees during a
// capture (cudaFree would break it). Bytes handed out are counted, with their peak, for the
// memory profile behind --gpu-memory-utilization.
class DevicePool {
 public:
  DevicePool(int device, bool best_fit) : device_(device), best_fit_(best_fit) {}
  ~DevicePool() {
    cudaSetDevice(device_);
    for (auto& [bytes, list] : free_) {
      for (void* p : list) cudaFree(p);
    }
  }

  static size_t round_up(size_t bytes) {
    if (bytes <= (size_t{1} << 20)) {
      size_t r = 512;
      while (r < bytes) r <<= 1;
      return r;
    }
    const size_t step = size_t{2} << 20;
    return (bytes + step - 1) / step * step;
  }

  // A block of at least `bytes` (already rounded); *got is its real size, to hand back to put().
  void* get(size_t bytes, size_t* got) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = best_fit_ ? free_.lower_bound(bytes) : free_.find(bytes);
      while (it != free_.end() && it->second.empty() && best_fit_ && it->first <= 2 * bytes) ++it;
      if (it != free_.end() && !it->second.empty() && it->first <= 2 * bytes) {
        void* p = it->second.back();
        it->second.pop_back();
        *got = it->first;
        cached_ -= it->first;
        note_get(it->first);
        return p;
      }
    }
    void* p = nullptr;
    // A graph-pool miss happens inside a capture (best-fit can hand a smaller request the block a
    // later, larger one needed). cudaMalloc is a "potentially unsafe" call that invalidates a
    // capture begun in global or thread-local mode, so the graphs would never capture; it is safe
    // here (never freed before the graphs are destroyed), so relax this thread's mode around it.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (best_fit_) cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t err = cudaMalloc(&p, bytes);
    if (best_fit_) cudaThreadExchangeStreamCaptureMode(&mode);
    if (err != cudaSuccess && !best_fit_) {
      cudaGetLastError();  // clear the sticky-free allocation error and retry after emptying the cache
      release_cached();
      err = cudaMalloc(&p, bytes);
    }
    CYPRIS_CHECK(err == cudaSuccess, "CUDA out of memory: cannot allocate {:.1f} MiB on device {} ({}); lower "
                 "--gpu-memory-utilization, --max-num-batched-tokens or --max-model-len",
                 static_cast<double>(bytes) / (1 << 20), device_, cudaGetErrorString(err));
    std::lock_guard<std::mutex> lock(mu_);
    reserved_ += bytes;
    *got = bytes;
    note_get(bytes);
    return p;
  }

  void put(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[bytes].push_back(p);
    cached_ += bytes;
    in_use_ -= bytes;
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    cudaDeviceSynchronize();
    for (auto& [bytes, list] : free_) {
      for (void* p : list) cudaFree(p);
      reserved_ -= bytes * list.size();
      list.clear();
    }
    cached_ = 0;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    baseline_ = peak_ = in_use_;
  }
  size_t peak_since_reset() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_ - baseline_;
  }
  size_t reserved() {
    std::lock_guard<std::mutex> lock(mu_);
    return reserved_;
  }

 private:
  void note_get(size_t bytes) {
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
  }

  int device_;
  bool best_fit_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;    // in the free lists
  size_t reserved_ = 0;  // from cudaMalloc, in all
  size_t in_use_ = 0;    // handed out
  size_t peak_ = 0, baseline_ = 0;
};

constexpr const char* kName = "cuda backend";
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

void require_device(const Tensor& t, const char* what) {
  CYPRIS_CHECK(t.device == Device::Cuda || t.numel() == 0, "cuda backend: {} is not in device memory", what);
}

}  // namespace

struct CudaBackend::Impl {
  int device = 0;
  bool fp32_gemm = false;
  DType act = DType::F32;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::shared_ptr<DevicePool> pool;
  std::shared_ptr<DevicePool> graph_pool;  // CUDA graphs' activations (cuda_graphs.cpp), made on first use
  bool use_graph_pool = false;
  void* cublas_workspace = nullptr;
  std::unique_ptr<PinnedStaging> staging;  // weight uploads; made on the first, dropped by release_cached_memory
  std::unique_ptr<WeightStreamer> streamer;  // --cpu-offload-gb

  DeviceTensor pooled(DType dtype, const std::vector<int64_t>& shape) {
    Tensor view(nullptr, dtype, shape, Device::Cuda);
    view.device_index = device;
    const size_t bytes = view.nbytes();
    if (bytes == 0) return DeviceTensor{view, nullptr};
    std::shared_ptr<DevicePool> from = use_graph_pool ? graph_pool : pool;
    size_t got = 0;
    void* p = from->get(DevicePool::round_up(bytes), &got);
    view.data = p;
    return DeviceTensor{view, std::shared_ptr<void>(p, [from, got](void* q) { from->put(q, got); })};
  }

  // Scratch memory for one call, returned to the pool when the call's work has been queued.
  DeviceTensor scratch(size_t bytes) {
    return pooled(DType::U8, {static_cast<int64_t>(bytes)});
  }
};

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: an error here means "no GPU"
    return 0;
  }
  return n;
}

std::optional<CudaDeviceMemory> cuda_device_memory(int device) {
  if (device < 0 || device >= cuda_device_count()) return std::nullopt;
  cudaDeviceProp prop{};
  int previous = 0;
  CudaDeviceMemory m;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || cudaGetDevice(&previous) != cudaSuccess ||
      cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  const bool ok = cudaMemGetInfo(&m.free_bytes, &m.total_bytes) == cudaSuccess;
  cudaSetDevice(previous);
  if (!ok) {
    cudaGetLastError();
    return std::nullopt;
  }
  m.name = prop.name;
  return m;
}

CudaBackend::CudaBackend(const CudaBackendOptions& options) : impl_(std::make_unique<Impl>()) {
  const int count = cuda_device_count();
  CYPRIS_CHECK(count > 0, "--device cuda: no CUDA device is available (no GPU or no driver); use --device cpu");
  CYPRIS_CHECK(options.device >= 0 && options.device < count, "CUDA device {} does not exist ({} device(s))",
               options.device, count);
  impl_->device = options.device;
  impl_->fp32_gemm = options.fp32_gemm;
  CYPRIS_CHECK(options.activation_dtype == DType::F32 || options.activation_dtype == DType::F16 ||
                   options.activation_dtype == DType::BF16,
               "cuda backend: activation dtype {} is not one of float32, float16, bfloat16",
               dtype_name(options.activation_dtype));
  impl_->act = options.activation_dtype;
  CUDA_CHECK(cudaSetDevice(options.device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  const cublasStatus_t st = cublasCreate(&impl_->cublas);
  CYPRIS_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLAS initialisation failed: {}", cublasGetStatusString(st));
  cublasSetStream(impl_->cublas, impl_->stream);
  cublasSetMathMode(impl_->cublas, CUBLAS_DEFAULT_MATH);  // no TF32: fp32 GEMMs stay fp32
  impl_->pool = std::make_shared<DevicePool>(options.device, false);
  // cuBLAS gets its workspace up front: allocating one lazily inside a graph capture would fail,
  // and the memory profile then counts it with the weights.
  CUDA_CHECK(cudaMalloc(&impl_->cublas_workspace, kCublasWorkspaceBytes));
  const cublasStatus_t ws = cublasSetWorkspace(impl_->cublas, impl_->cublas_workspace, kCublasWorkspaceBytes);
  CYPRIS_CHECK(ws == CUBLAS_STATUS_SUCCESS, "cuBLAS workspace: {}", cublasGetStatusString(ws));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
  if (!options.weight_offload.empty()) {
    impl_->streamer = std::make_unique<WeightStreamer>(options.weight_offload, options.device, impl_->stream);
  }
  LOG_INFO("CUDA backend on device {}: {} (sm_{}{}, {} SMs, {:.1f} GiB)", options.device, prop.name, prop.major,
           prop.minor, prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1u << 30));
}

CudaBackend::~CudaBackend() {
  if (impl_->stream) cudaStreamSynchronize(impl_->stream);
  impl_->streamer.reset();
  if (impl_->cublas) cublasDestroy(impl_->cublas);
  if (impl_->cublas_workspace) cudaFree(impl_->cublas_workspace);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

void CudaBackend::reset_peak_memory() {
  impl_->pool->reset_peak();
}

size_t CudaBackend::peak_memory_bytes() {
  return impl_->pool->peak_since_reset();
}

void CudaBackend::release_cached_memory() {
  impl_->pool->release_cached();
  impl_->staging.reset();  // the weights are in place by the profile run
}

void CudaBackend::set_graph_pool(bool on) {
  if (on && !impl_->graph_pool) impl_->graph_pool = std::make_shared<DevicePool>(impl_->device, true);
  impl_->use_graph_pool = on;
}

size_t CudaBackend::graph_pool_bytes() const {
  return impl_->graph_pool ? impl_->graph_pool->reserved() : 0;
}

void* CudaBackend::stream() const { return impl_->stream; }

DType CudaBackend::activation_dtype() const { return impl_->act; }

DeviceTensor CudaBackend::empty(DType dtype, const std::vector<int64_t>& shape) { return impl_->pooled(dtype, shape); }

DeviceTensor CudaBackend::zeros(DType dtype, const std::vector<int64_t>& shape) {
  DeviceTensor t = empty(dtype, shape);
  if (t.view.nbytes()) CUDA_CHECK(cudaMemsetAsync(t.view.data, 0, t.view.nbytes(), impl_->stream));
  return t;
}

DeviceTensor CudaBackend::upload(const void* data, DType dtype, const std::vector<int64_t>& shape) {
  DeviceTensor t = empty(dtype, shape);
  // From pageable memory the call returns once the data is staged, so the caller may reuse it.
  if (t.view.nbytes()) {
    CUDA_CHECK(cudaMemcpyAsync(t.view.data, data, t.view.nbytes(), cudaMemcpyHostToDevice, impl_->stream));
  }
  return t;
}

DeviceTensor CudaBackend::empty_exact(DType dtype, const std::vector<int64_t>& shape) {
  Tensor view(nullptr, dtype, shape, Device::Cuda);
  view.device_index = impl_->device;
  if (view.nbytes() == 0) return DeviceTensor{view, nullptr};
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, view.nbytes());
  CYPRIS_CHECK(err == cudaSuccess, "CUDA out of memory: cannot allocate {:.1f} MiB for a {} tensor {} ({})",
               static_cast<double>(view.nbytes()) / (1 << 20), dtype_name(dtype), view.shape_str(),
               cudaGetErrorString(err));
  view.data = p;
  return DeviceTensor{view, std::shared_ptr<void>(p, [](void* q) { cudaFree(q); })};
}

DeviceTensor CudaBackend::upload_weight(HostTensor&& host) {
  if (impl_->streamer && impl_->streamer->loading_offloaded()) {
    if (std::optional<DeviceTensor> t = impl_->streamer->place(host)) return std::move(*t);
  }
  DeviceTensor t = empty_exact(host.dtype, host.shape);
  if (t.view.nbytes()) {
    CYPRIS_CHECK(host.buffer.size() >= t.view.nbytes(), "upload_weight: host buffer of {} bytes for {} bytes",
                 host.buffer.size(), t.view.nbytes());
    // Through pinned double buffers; complete when this returns (the host buffer is freed then).
    if (!impl_->staging) impl_->staging = std::make_unique<PinnedStaging>();
    impl_->staging->copy_to_device(t.view.data, host.buffer.data(), t.view.nbytes(), impl_->stream);
  }
  return t;
}

std::optional<DeviceTensor> CudaBackend::dummy_weight(DType dtype, const std::vector<int64_t>& shape,
                                                      const std::vector<DummyFill>& runs) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) return std::nullopt;
  // An offloaded layer's weights are made on the host and go to pinned memory (upload_weight).
  if (impl_->streamer && impl_->streamer->loading_offloaded()) return std::nullopt;
  DeviceTensor t = empty_exact(dtype, shape);
  backend_checks::check_dummy_runs(kName, t.view.numel(), runs);
  for (const DummyFill& run : runs) dummy_fill_cuda(t.view.data, dtype, run, impl_->stream);
  // Ready when this returns, like upload_weight (other streams may read it next).
  CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return t;
}

void CudaBackend::download(const Tensor& t, void* dst) {
  require_contiguous(kName, t, "download source");
  if (!t.nbytes()) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, t.data, t.nbytes(), cudaMemcpyDefault, impl_->stream));
  CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

void CudaBackend::upload_into(const void* src, Tensor& dst) {
  require_contiguous(kName, dst, "upload destination");
  if (!dst.nbytes()) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, impl_->stream));
  CUDA_CHECK(cudaStreamSynchronize(impl_->stream));  // the caller may free src when this returns
}

DeviceTensor CudaBackend::empty_host(DType dtype, const std::vector<int64_t>& shape) {
  Tensor view(nullptr, dtype, shape, Device::Cpu);
  if (view.nbytes() == 0) return DeviceTensor{view, nullptr};
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, view.nbytes());
  CYPRIS_CHECK(err == cudaSuccess, "cannot pin {:.1f} MiB of host memory for the KV swap space ({}); lower --swap-space",
               static_cast<double>(view.nbytes()) / (1 << 20), cudaGetErrorString(err));
  view.data = p;
  return DeviceTensor{view, std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); })};
}

void CudaBackend::weights_of_layer(int layer) {
  if (impl_->streamer) impl_->streamer->set_loading_layer(layer);
}

void CudaBackend::begin_layers() {
  if (impl_->streamer) impl_->streamer->begin_layers();
}

void CudaBackend::before_layer(int layer) {
  if (impl_->streamer) impl_->streamer->before_layer(layer);
}

WeightOffloadStats CudaBackend::weight_offload_stats() const {
  return impl_->streamer ? impl_->streamer->stats() : WeightOffloadStats{};
}

void CudaBackend::synchronize() { CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

DeviceMemoryInfo CudaBackend::memory_info() {
  DeviceMemoryInfo info;
  CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  backend_checks::check_embedding(kName, activation_dtype(), ids, table, out);
  require_device(table, "embedding table");
  if (dtype_is_quantized(table.dtype)) {
    quant_embedding_cuda(ids.as<int32_t>(), ids.shape[0], table.data, table.dtype, table.shape[0], table.shape[1],
                         out.data, out.dtype, impl_->stream);
    return;
  }
  embedding_cuda(ids.as<int32_t>(), ids.shape[0], table.data, table.dtype, table.shape[0], table.shape[1], out.data,
                 out.dtype, impl_->stream);
}

// The quantized GEMV reads x with 16-byte loads: x itself when it is aligned for them (the usual
// case: a whole activation buffer), else a contiguous copy of the same type.
CudaBackend::GemvRows CudaBackend::gemv_rows(const Tensor& x) {
  GemvRows r;
  if (quant_gemv_aligned(x.data, x.dtype, row_stride(x))) {
    r.data = x.data;
    r.ld = row_stride(x);
    return r;
  }
  r.copy = empty(x.dtype, x.shape);
  convert_cuda(x.data, x.dtype, x.shape[0], x.shape[1], row_stride(x), r.copy.view.data, x.dtype, x.shape[1],
               impl_->stream);
  r.data = r.copy.view.data;
  r.ld = x.shape[1];
  return r;
}

void CudaBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  backend_checks::check_linear(kName, activation_dtype(), x, w, bias, out);
  require_device(w, "linear weight");
  const GemmPrecision precision = impl_->fp32_gemm ? GemmPrecision::Fp32 : GemmPrecision::Fast;
  const int64_t m = x.shape[0], k = x.shape[1], n = w.shape[0];
  if (dtype_is_quantized(w.dtype)) {
    // GGUF weights: decode batches take the fused dequantize-and-dot GEMV (reading the activations
    // and writing the output in their own types); larger batches dequantize tiles of weight rows
    // (at most ~32 MiB at a time) to the activations' 16-bit type (fp16 for fp32 activations) and run
    // the tensor-core GEMM on each tile.
    const float* b = bias ? bias->as<float>() : nullptr;
    if (m <= kQuantGemvMaxRows) {
      const GemvRows xs = gemv_rows(x);
      quant_gemv_cuda(xs.data, x.dtype, m, k, xs.ld, w.data, w.dtype, n, b, out.data, out.dtype, row_stride(out),
                      impl_->stream);
      return;
    }
    const DType tile_dtype = x.dtype == DType::F32 ? DType::F16 : x.dtype;
    const int64_t tile = std::min<int64_t>(n, std::max<int64_t>(64, (int64_t{1} << 24) / k));
    const size_t tile_bytes = (static_cast<size_t>(tile * k) * 2 + 255) / 256 * 256;
    const size_t gemm_bytes = gemm_scratch_bytes(m, k, tile, x.dtype, tile_dtype, out.dtype, precision);
    DeviceTensor scratch = impl_->scratch(tile_bytes + gemm_bytes);
    void* tile_w = scratch.view.data;
    void* gemm_scratch = gemm_bytes ? static_cast<char*>(scratch.view.data) + tile_bytes : nullptr;
    const size_t out_elem = dtype_size(out.dtype);
    for (int64_t n0 = 0; n0 < n; n0 += tile) {
      const int64_t nb = std::min(tile, n - n0);
      quant_dequant_rows_cuda(w.data, w.dtype, n0, nb, k, tile_w, tile_dtype, impl_->stream);
      gemm_xwt_cuda(impl_->cublas, x.data, x.dtype, m, k, row_stride(x), tile_w, tile_dtype, nb,
                    b ? b + n0 : nullptr, static_cast<char*>(out.data) + n0 * out_elem, out.dtype, row_stride(out),
                    gemm_scratch, precision, impl_->stream);
    }
    return;
  }
  const size_t scratch_bytes = gemm_scratch_bytes(m, k, n, x.dtype, w.dtype, out.dtype, precision);
  DeviceTensor scratch = scratch_bytes ? impl_->scratch(scratch_bytes) : DeviceTensor{};
  gemm_xwt_cuda(impl_->cublas, x.data, x.dtype, m, k, row_stride(x), w.data, w.dtype, n,
                bias ? bias->as<float>() : nullptr, out.data, out.dtype, row_stride(out), scratch.view.data,
                precision, impl_->stream);
}

void CudaBackend::grouped_linear(const Tensor& x, const std::vector<LinearGroup>& groups, Tensor& out) {
  if (!backend_checks::check_grouped_linear(kName, activation_dtype(), x, groups, out)) return;
  std::vector<GemmGroup> live;
  int64_t max_rows = 0;
  for (const LinearGroup& g : groups) {
    if (g.rows == 0) continue;
    require_device(*g.w, "grouped linear weight");
    live.push_back({g.w->data, g.first, g.rows});
    max_rows = std::max(max_rows, g.rows);
  }
  const DType wt = groups.front().w->dtype;
  const int64_t k = x.shape[1], n = out.shape[1];
  const auto count = static_cast<int64_t>(live.size());
  if (dtype_is_quantized(wt)) {
    if (max_rows > kQuantGemvMaxRows) {
      Backend::grouped_linear(x, groups, out);  // prefill: 16-bit tiles + GEMM per expert
      return;
    }
    const GemvRows xs = gemv_rows(x);
    quant_gemv_grouped_cuda(xs.data, x.dtype, k, xs.ld, live.data(), count, wt, n, out.data, out.dtype,
                            row_stride(out), impl_->stream);
    return;
  }
  if (max_rows <= kGemvMaxRows && gemv_supported(x.dtype, wt, out.dtype)) {
    gemv_grouped_xwt_cuda(x.data, x.dtype, k, row_stride(x), live.data(), count, wt, n, out.data, out.dtype,
                          row_stride(out), impl_->stream);
    return;
  }
  const bool tensor_cores = !impl_->fp32_gemm && wt != DType::F32 && x.dtype == wt && out.dtype == wt;
  if (tensor_cores) {
    DeviceTensor ptrs = impl_->scratch(static_cast<size_t>(3 * count) * sizeof(void*));
    if (gemm_grouped_cuda(impl_->cublas, x.data, k, row_stride(x), live.data(), count, wt, n, out.data,
                          row_stride(out), static_cast<void**>(ptrs.view.data), impl_->stream)) {
      return;
    }
  }
  Backend::grouped_linear(x, groups, out);
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  backend_checks::check_rms_norm(kName, activation_dtype(), x, w, out);
  rms_norm_cuda(x.data, x.dtype, w.as<float>(), eps, x.shape[0], x.shape[1], out.data, impl_->stream);
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& w, const Tensor* bias, float eps, Tensor& out) {
  backend_checks::check_layer_norm(kName, activation_dtype(), x, w, bias, out);
  layer_norm_cuda(x.data, x.dtype, w.as<float>(), bias ? bias->as<float>() : nullptr, eps, x.shape[0], x.shape[1],
                  out.data, impl_->stream);
}

void CudaBackend::fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) {
  backend_checks::check_fused_add_rms_norm(kName, activation_dtype(), x, residual, w);
  fused_add_rms_norm_cuda(x.data, residual.data, x.dtype, w.as<float>(), eps, x.shape[0], x.shape[1],
                          impl_->stream);
}

void CudaBackend::rotary(Tensor& q, Tensor& k, const Tensor& positions, const Tensor& cos_sin, int head_dim) {
  backend_checks::check_rotary(kName, activation_dtype(), q, k, positions, cos_sin, head_dim);
  rotary_cuda(q.data, row_stride(q), static_cast<int>(q.shape[1] / head_dim), k.data, row_stride(k),
              static_cast<int>(k.shape[1] / head_dim), q.dtype, head_dim, static_cast<int>(cos_sin.shape[1]),
              positions.as<int32_t>(), positions.shape[0], cos_sin.as<float>(), cos_sin.shape[0], impl_->stream);
}

void CudaBackend::write_kv_cache(const Tensor& k, const Tensor& v, const AttentionMetadata& meta, Tensor& k_cache,
                                 Tensor& v_cache, const KvCacheScales& kv_scales) {
  const int64_t width = backend_checks::check_write_kv_cache(kName, activation_dtype(), k, v, meta, k_cache, v_cache);
  reshape_and_cache_cuda(k.data, row_stride(k), v.data, row_stride(v), k.dtype, k.shape[0],
                         meta.slot_mapping.as<int64_t>(), width, k_cache.data, v_cache.data,
                         k_cache.shape[0] * k_cache.shape[1], impl_->stream, k_cache.dtype, kv_scales.k, kv_scales.v);
}

void CudaBackend::rotary_and_write_kv_cache(Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions,
                                            const Tensor& cos_sin, int head_dim, const AttentionMetadata& meta,
                                            Tensor& k_cache, Tensor& v_cache, const KvCacheScales& kv_scales) {
  backend_checks::check_rotary(kName, activation_dtype(), q, k, positions, cos_sin, head_dim);
  backend_checks::check_write_kv_cache(kName, activation_dtype(), k, v, meta, k_cache, v_cache);
  if (k_cache.shape[3] != head_dim || v.dtype != k.dtype) {  // not the layout the fused kernel writes
    Backend::rotary_and_write_kv_cache(q, k, v, positions, cos_sin, head_dim, meta, k_cache, v_cache, kv_scales);
    return;
  }
  RotaryCacheArgs a;
  a.q = q.data;
  a.ldq = row_stride(q);
  a.k = k.data;
  a.ldk = row_stride(k);
  a.v = v.data;
  a.ldv = row_stride(v);
  a.num_q_heads = static_cast<int>(q.shape[1] / head_dim);
  a.num_kv_heads = static_cast<int>(k.shape[1] / head_dim);
  a.head_dim = head_dim;
  a.rot_dim = static_cast<int>(cos_sin.shape[1]);
  a.positions = positions.as<int32_t>();
  a.cos_sin = cos_sin.as<float>();
  a.max_pos = cos_sin.shape[0];
  a.slot_mapping = meta.slot_mapping.as<int64_t>();
  a.k_cache = k_cache.data;
  a.v_cache = v_cache.data;
  a.num_slots = k_cache.shape[0] * k_cache.shape[1];
  a.num_tokens = q.shape[0];
  rotary_and_cache_cuda(a, q.dtype, k_cache.dtype, kv_scales.k, kv_scales.v, impl_->stream);
}

void CudaBackend::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const AttentionMetadata& meta, float scale, int sliding_window, Tensor& out,
                                  const KvCacheScales& kv_scales, float softcap) {
  PagedAttentionCudaParams p;
  static_cast<PagedAttentionParams&>(p) = backend_checks::paged_attention_params(
      kName, activation_dtype(), q, k_cache, v_cache, meta, scale, sliding_window, out, kv_scales, softcap);
  p.num_tokens = q.shape[0];
  p.max_query_len = meta.max_query_len;
  p.max_seq_len = meta.max_seq_len;
  const size_t ws = paged_attention_workspace_bytes(p);
  DeviceTensor workspace = ws ? impl_->scratch(ws) : DeviceTensor{};
  paged_attention_cuda(p, workspace.view.data, impl_->stream);
}

void CudaBackend::silu_and_mul(const Tensor& x, Tensor& out) {
  backend_checks::check_silu_and_mul(kName, activation_dtype(), x, out);
  silu_and_mul_cuda(x.data, x.dtype, x.shape[0], out.shape[1], out.data, impl_->stream);
}

void CudaBackend::gelu_tanh_and_mul(const Tensor& x, Tensor& out) {
  backend_checks::check_silu_and_mul(kName, activation_dtype(), x, out);
  gelu_tanh_and_mul_cuda(x.data, x.dtype, x.shape[0], out.shape[1], out.data, impl_->stream);
}

void CudaBackend::rms_norm_heads(Tensor& x, const Tensor& w, float eps) {
  backend_checks::check_rms_norm_heads(kName, activation_dtype(), x, w);
  const int d = static_cast<int>(w.shape[0]);
  rms_norm_heads_cuda(x.data, x.dtype, row_stride(x), x.shape[0], static_cast<int>(x.shape[1] / d), d,
                      w.as<float>(), eps, impl_->stream);
}

void CudaBackend::layer_norm_heads(Tensor& x, const Tensor& w, float eps) {
  backend_checks::check_layer_norm_heads(kName, activation_dtype(), x, w);
  layer_norm_heads_cuda(x.data, x.dtype, row_stride(x), x.shape[0], static_cast<int>(w.shape[0]),
                        static_cast<int>(w.shape[1]), w.as<float>(), eps, impl_->stream);
}

void CudaBackend::scale_and_cap(Tensor& x, float scale, float cap) {
  // Logits (F32) are capped as well as activations.
  backend_checks::check_scale_and_cap(kName, x.dtype == DType::F32 ? DType::F32 : activation_dtype(), x, scale, cap);
  scale_and_cap_cuda(x.data, x.dtype, x.shape[0], x.shape[1], row_stride(x), scale, cap, impl_->stream);
}

void CudaBackend::lora_linear(const Tensor& x, const Tensor& slots, const Tensor& a, const Tensor& b,
                              const Tensor& scales, Tensor& out) {
  backend_checks::check_lora_linear(kName, activation_dtype(), x, slots, a, b, scales, out);
  // Small batches gather per row (BGMV); from 64 rows (prefills, large decode batches) the segmented
  // GEMM reads each adapter's A and B once per tile of 16 rows. Both read the slots on the device only,
  // so decode graphs capture either.
  constexpr int64_t kSegmentedMinRows = 64;
  if (x.shape[0] >= kSegmentedMinRows) {
    DeviceTensor tmp = empty(DType::F32, {x.shape[0], a.shape[1]});
    lora_sgmv_cuda(x.data, row_stride(x), slots.as<int32_t>(), x.shape[0], a.data, b.data, scales.as<float>(),
                   a.shape[1], a.shape[2], b.shape[1], out.data, row_stride(out), tmp.view.as<float>(), x.dtype,
                   impl_->stream);
    return;
  }
  lora_bgmv_cuda(x.data, row_stride(x), slots.as<int32_t>(), x.shape[0], a.data, b.data, scales.as<float>(),
                 a.shape[1], a.shape[2], b.shape[1], out.data, row_stride(out), x.dtype, impl_->stream);
}

void CudaBackend::add(const Tensor& x, Tensor& out) {
  backend_checks::check_add(kName, activation_dtype(), x, out);
  add_rows_cuda(x.data, row_stride(x), out.data, row_stride(out), x.dtype, x.shape[0], x.shape[1], impl_->stream);
}

void CudaBackend::scatter_add_rows(const Tensor& src, const Tensor& indices, const Tensor& weights, Tensor& out) {
  backend_checks::check_scatter_add_rows(kName, activation_dtype(), src, indices, weights, out);
  scatter_add_rows_cuda(src.data, src.dtype, src.shape[0], src.shape[1], indices.as<int32_t>(), weights.as<float>(),
                        out.data, out.shape[0], impl_->stream);
}

void CudaBackend::gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) {
  backend_checks::check_gather_rows(kName, x.dtype == DType::F32 ? DType::F32 : activation_dtype(), x, indices, out);
  gather_rows_cuda(x.data, dtype_size(x.dtype), x.shape[0], x.shape[1], indices.as<int32_t>(), indices.shape[0],
                   out.data, impl_->stream);
}

void CudaBackend::copy_blocks(const std::vector<Tensor>& caches, const std::vector<int64_t>& src_dst) {
  CYPRIS_CHECK(src_dst.size() % 2 == 0, "cuda backend: copy_blocks needs (src, dst) pairs");
  if (caches.empty() || src_dst.empty()) return;
  const int64_t block_bytes = static_cast<int64_t>(caches[0].nbytes() / static_cast<size_t>(caches[0].shape[0]));
  std::vector<uint64_t> ptrs;
  for (const Tensor& c : caches) {
    require_device(c, "copy_blocks cache");
    CYPRIS_CHECK(static_cast<int64_t>(c.nbytes() / static_cast<size_t>(c.shape[0])) == block_bytes,
                 "cuda backend: copy_blocks caches differ in block size");
    ptrs.push_back(reinterpret_cast<uint64_t>(c.data));
  }
  const int64_t num_pairs = static_cast<int64_t>(src_dst.size() / 2);
  DeviceTensor dptrs = upload(ptrs.data(), DType::I64, {static_cast<int64_t>(ptrs.size())});
  DeviceTensor dpairs = upload(src_dst.data(), DType::I64, {num_pairs, 2});
  for (int64_t p0 = 0; p0 < num_pairs; p0 += 65535) {
    const int64_t n = std::min<int64_t>(65535, num_pairs - p0);
    copy_blocks_cuda(static_cast<const uint64_t*>(dptrs.view.data), static_cast<int>(ptrs.size()),
                     dpairs.view.as<int64_t>() + 2 * p0, n, block_bytes, impl_->stream);
  }
}

void CudaBackend::swap_blocks(const Tensor& src, Tensor& dst, const std::vector<int64_t>& src_dst) {
  CYPRIS_CHECK(src_dst.size() % 2 == 0 && src.ndim() >= 1 && dst.ndim() >= 1, "cuda backend: swap_blocks arguments");
  if (src_dst.empty()) return;
  const size_t bytes = src.nbytes() / static_cast<size_t>(src.shape[0]);
  CYPRIS_CHECK(bytes == dst.nbytes() / static_cast<size_t>(dst.shape[0]),
               "cuda backend: swap_blocks between tensors of different block sizes");
  // Device <-> pinned host: cudaMemcpyDefault lets unified addressing pick the direction.
  for (size_t i = 0; i < src_dst.size(); i += 2) {
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst.data) + src_dst[i + 1] * bytes,
                               static_cast<const char*>(src.data) + src_dst[i] * bytes, bytes, cudaMemcpyDefault,
                               impl_->stream));
  }
}

void CudaBackend::move_kv_slots(Tensor& k_cache, Tensor& v_cache, const std::vector<int64_t>& src_dst,
                                const std::vector<float>& cos_sin, int rot_dim, const KvCacheScales& kv_scales) {
  require_device(k_cache, "move_kv_slots k_cache");
  require_device(v_cache, "move_kv_slots v_cache");
  CYPRIS_CHECK(k_cache.ndim() == 4 && k_cache.shape == v_cache.shape && k_cache.dtype == v_cache.dtype,
               "cuda backend: move_kv_slots needs K and V caches of one shape [blocks, block_size, heads, head_dim]");
  CYPRIS_CHECK(src_dst.size() % 2 == 0, "cuda backend: move_kv_slots needs (src, dst) slot pairs");
  const int64_t num_moves = static_cast<int64_t>(src_dst.size() / 2);
  if (num_moves == 0) return;
  if (cos_sin.empty()) rot_dim = 0;
  CYPRIS_CHECK(rot_dim == 0 || static_cast<int64_t>(cos_sin.size()) == num_moves * rot_dim,
               "cuda backend: move_kv_slots has {} cos/sin values for {} moves of rot_dim {}", cos_sin.size(),
               num_moves, rot_dim);
  const int64_t num_slots = k_cache.shape[0] * k_cache.shape[1];
  for (int64_t s : src_dst)
    CYPRIS_CHECK(s >= 0 && s < num_slots, "cuda backend: move_kv_slots slot {} is outside the cache ({} slots)", s,
                 num_slots);
  const int64_t width = k_cache.shape[2] * k_cache.shape[3];
  DeviceTensor pairs = upload(src_dst.data(), DType::I64, {num_moves, 2});
  DeviceTensor angles;
  if (rot_dim > 0) angles = upload(cos_sin.data(), DType::F32, {num_moves, rot_dim});
  DeviceTensor keys = empty(DType::F32, {num_moves, width});
  DeviceTensor values = empty(k_cache.dtype, {num_moves, width});
  move_kv_slots_cuda(k_cache.data, v_cache.data, k_cache.dtype, static_cast<int>(k_cache.shape[2]),
                     static_cast<int>(k_cache.shape[3]), rot_dim, pairs.view.as<int64_t>(), num_moves,
                     rot_dim > 0 ? angles.view.as<float>() : nullptr, kv_scales.k, keys.view.as<float>(),
                     values.view.data, impl_->stream);
}

}  // namespace cypris
