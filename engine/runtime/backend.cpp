#include "engine/runtime/backend.h"

#include "engine/common/error.h"

namespace cypris {

Tensor column_slice(const Tensor& t, int64_t col0, int64_t ncols) {
  CYPRIS_CHECK(t.ndim() == 2 && col0 >= 0 && col0 + ncols <= t.shape[1], "column_slice: [{}, {}) of {}", col0,
               col0 + ncols, t.shape_str());
  Tensor s = t;
  s.data = static_cast<char*>(t.data) + col0 * dtype_size(t.dtype);
  s.shape = {t.shape[0], ncols};
  s.strides = {row_stride(t), 1};
  return s;
}

}  // namespace cypris
