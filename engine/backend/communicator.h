// The collectives tensor parallelism needs between the ranks of one model: a sum all-reduce after
// the row-parallel layers, an all-gather of vocab-parallel logits, and a barrier; point-to-point
// send / recv for hand-offs between pipeline stages. CpuCommunicator (in-process threads),
// NcclCommunicator (one per GPU) and the MPI communicator between processes (mpi_world.h)
// implement it.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"
#include "engine/common/error.h"

namespace cypris {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: data[i] = sum over ranks of data[i], on every rank. data lives where this rank's
  // backend keeps its tensors (host memory for CPU ranks, device memory for GPU ranks).
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  // The same for activations of any float type (F32, or F16 / BF16 on a GPU, summed by NCCL in
  // that type as vLLM does); the CPU communicator takes F32 only.
  virtual void all_reduce(void* data, DType dtype, int64_t count) {
    CYPRIS_CHECK(dtype == DType::F32, "tensor-parallel all-reduce: {} activations are not supported here (float32)",
                 dtype_name(dtype));
    all_reduce_sum(static_cast<float*>(data), count);
  }
  // recv = [rank 0's send | rank 1's send | ...], world_size * count elements, on every rank.
  virtual void all_gather(const float* send, float* recv, int64_t count) = 0;
  virtual void barrier() = 0;
  // Point to point between pipeline stages: count elements of `dtype` to / from rank `peer`, in
  // order per pair. start_send / start_recv begin the transfer and return a ticket; finish(ticket)
  // waits until the send's buffer may be reused or the received data may be read (polled with the
  // communicator's deadline). On GPUs (NCCL) both are enqueued on the rank's stream, ordered with its
  // kernels, and finish returns at once. Only communicators that span pipeline stages implement them.
  virtual int64_t start_send(const void* /*data*/, DType dtype, int64_t count, int peer) {
    CYPRIS_FAIL("this communicator has no point-to-point send ({} {} elements to rank {})", count, dtype_name(dtype),
                peer);
  }
  virtual int64_t start_recv(void* /*data*/, DType dtype, int64_t count, int peer) {
    CYPRIS_FAIL("this communicator has no point-to-point recv ({} {} elements from rank {})", count,
                dtype_name(dtype), peer);
  }
  virtual void finish(int64_t /*ticket*/) {}
  // Blocking forms of the two.
  void send(const float* data, int64_t count, int peer) { finish(start_send(data, DType::F32, count, peer)); }
  void recv(float* data, int64_t count, int peer) { finish(start_recv(data, DType::F32, count, peer)); }
  // GPU communicators enqueue their work on this stream (cudaStream_t: the rank's compute stream, so
  // a collective runs after the kernels that produced its input); others ignore it.
  virtual void set_stream(void* /*stream*/) {}
};

}  // namespace cypris
