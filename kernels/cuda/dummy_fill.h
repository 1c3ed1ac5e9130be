// Launcher for dummy weights generated on the device (--load-format dummy), so that an 8B model's
// weights need no host generation and no upload. CPU reference: dummy_fill_cpu
// (kernels/cpu/dummy_fill.h); both evaluate dummy_value of kernels/common/dummy_fill.h.
#pragma once

#include <cuda_runtime.h>

#include "engine/common/dtype.h"
#include "kernels/common/dummy_fill.h"

namespace cypris {

// Writes run.rows x run.row_len elements at element run.dst_offset of dst (device memory, F32,
// F16 or BF16; round to nearest even).
void dummy_fill_cuda(void* dst, DType dtype, const DummyFill& run, cudaStream_t stream);

}  // namespace cypris
