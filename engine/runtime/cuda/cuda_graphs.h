// CUDA graphs for decode batches on a CudaBackend (vLLM's CUDAGraphRunner): one graph per capture
// size over persistent input buffers, replayed for pure-decode batches padded to that size. The
// ModelRunner reaches it through DecodeGraphRunner (engine/runtime/decode_graphs.h). Free of CUDA
// headers.
#pragma once

#include <memory>

#include "engine/runtime/decode_graphs.h"

namespace cypris {

class CudaBackend;

std::unique_ptr<DecodeGraphRunner> make_cuda_decode_graphs(CudaBackend& backend, const DecodeGraphPolicy& policy,
                                                           int block_size);

}  // namespace cypris
