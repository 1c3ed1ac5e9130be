#include "engine/backend/gather_columns.h"

#include "engine/common/error.h"
#include "kernels/cpu/gather_columns.h"
#if CYPRIS_HAVE_CUDA
#include "kernels/cuda/gather_columns.h"
#endif

namespace cypris {

void gather_columns(Backend& b, const Tensor& x, const Tensor& cols, Tensor& out) {
  CYPRIS_CHECK(x.ndim() == 2 && out.ndim() == 2 && cols.ndim() == 1 && cols.dtype == DType::I32 &&
                   x.dtype == out.dtype && out.shape[0] == x.shape[0] && out.shape[1] == cols.shape[0] &&
                   (dtype_size(x.dtype) == 2 || dtype_size(x.dtype) == 4) && !dtype_is_quantized(x.dtype),
               "{}: gather_columns x {} {}, cols {} {}, out {} {}: needs x [T, K], cols I32 [n], out [T, n] of x's "
               "dtype",
               b.name(), dtype_name(x.dtype), x.shape_str(), dtype_name(cols.dtype), cols.shape_str(),
               dtype_name(out.dtype), out.shape_str());
  CYPRIS_CHECK(x.device == b.device() && cols.device == b.device() && out.device == b.device(),
               "{}: gather_columns tensors must live on the backend's device", b.name());
  if (b.device() == Device::Cpu) {
    gather_columns_cpu(x.data, x.shape[0], row_stride(x), dtype_size(x.dtype), cols.as<int32_t>(), cols.shape[0],
                       out.data, row_stride(out));
    return;
  }
#if CYPRIS_HAVE_CUDA
  gather_columns_cuda(x.data, x.shape[0], x.shape[1], row_stride(x), dtype_size(x.dtype), cols.as<int32_t>(),
                      cols.shape[0], out.data, row_stride(out), static_cast<cudaStream_t>(b.stream()));
#else
  CYPRIS_FAIL("{}: gather_columns: no kernel for this device", b.name());
#endif
}

}  // namespace cypris
