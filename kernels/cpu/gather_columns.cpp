#include "kernels/cpu/gather_columns.h"

#include <cstring>

#include "engine/common/error.h"

namespace cypris {
namespace {

template <typename T>
void gather(const T* x, int64_t rows, int64_t x_ld, const int32_t* cols, int64_t n, T* out, int64_t out_ld) {
  for (int64_t t = 0; t < rows; ++t) {
    const T* src = x + t * x_ld;
    T* dst = out + t * out_ld;
    for (int64_t j = 0; j < n; ++j) dst[j] = src[cols[j]];
  }
}

}  // namespace

void gather_columns_cpu(const void* x, int64_t rows, int64_t x_ld, size_t elem_bytes, const int32_t* cols, int64_t n,
                        void* out, int64_t out_ld) {
  if (elem_bytes == 4) {
    return gather(static_cast<const uint32_t*>(x), rows, x_ld, cols, n, static_cast<uint32_t*>(out), out_ld);
  }
  CYPRIS_CHECK(elem_bytes == 2, "gather_columns_cpu: elements of {} bytes (2 or 4 allowed)", elem_bytes);
  gather(static_cast<const uint16_t*>(x), rows, x_ld, cols, n, static_cast<uint16_t*>(out), out_ld);
}

}  // namespace cypris
