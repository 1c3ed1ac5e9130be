#include "kernels/cpu/dummy_fill.h"

#include <algorithm>

#include "engine/common/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {

void dummy_fill_cpu(void* dst, DType dtype, const DummyFill& run, ThreadPool* pool) {
  // Any element type convert_from_f32 writes; a block-quantized one cannot be cut into runs.
  CYPRIS_CHECK(!dtype_is_quantized(dtype), "dummy weights: dtype {} is block-quantized", dtype_name(dtype));
  CYPRIS_CHECK(run.rows >= 0 && run.row_len >= 0 && run.dst_offset >= 0 && run.src_offset >= 0,
               "dummy weights: a run of {} x {} at {} from {}", run.rows, run.row_len, run.dst_offset, run.src_offset);
  const int64_t total = run.rows * run.row_len;
  if (total == 0) return;
  const size_t es = dtype_size(dtype);
  char* base = static_cast<char*>(dst) + static_cast<size_t>(run.dst_offset) * es;
  constexpr int64_t kChunk = 1 << 16;  // elements per task: big enough to amortise, small enough to balance
  const int64_t tasks = (total + kChunk - 1) / kChunk;
  (pool ? *pool : shared_thread_pool()).parallel_for(tasks, [&](int64_t t0, int64_t t1) {
    float tmp[4096];
    for (int64_t j = t0 * kChunk, end = std::min(total, t1 * kChunk); j < end;) {
      const int64_t r = j / run.row_len;
      const int64_t c = j - r * run.row_len;
      const int64_t n = std::min<int64_t>({end - j, run.row_len - c, int64_t(4096)});
      const uint64_t src = static_cast<uint64_t>(run.src_offset + r * run.src_row_stride + c);
      for (int64_t i = 0; i < n; ++i) tmp[i] = dummy_value(run.key, run.scale, src + static_cast<uint64_t>(i));
      convert_from_f32(tmp, dtype, base + static_cast<size_t>(j) * es, n);
      j += n;
    }
  });
}

}  // namespace cypris
