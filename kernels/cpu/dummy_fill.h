// Dummy weights on the CPU: the runs of kernels/common/dummy_fill.h written into host memory in
// the weight's dtype, in parallel. The reference for dummy_fill_cuda (kernels/cuda/dummy_fill.h).
#pragma once

#include "engine/common/dtype.h"
#include "kernels/common/dummy_fill.h"

namespace cypris {

class ThreadPool;

// Writes run.rows x run.row_len elements at element run.dst_offset of dst (any element type
// convert_from_f32 writes: F32, F16, BF16, ...; round to nearest even). pool: the threads to use;
// nullptr uses shared_thread_pool(). The values do not depend on the number of threads.
void dummy_fill_cpu(void* dst, DType dtype, const DummyFill& run, ThreadPool* pool = nullptr);

}  // namespace cypris
