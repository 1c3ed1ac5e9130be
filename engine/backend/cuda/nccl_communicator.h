// The Communicator for GPU ranks: NCCL collectives, one communicator per GPU of this process
// (device ordinals as CUDA_VISIBLE_DEVICES presents them). Compiled only in the CUDA build.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "engine/backend/communicator.h"

namespace cypris {

class NcclCommunicator : public Communicator {
 public:
  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int device() const { return device_; }
  // The CUDA stream (cudaStream_t) the collectives are enqueued on; the backend's compute stream
  // of this rank, so a collective runs after the kernels that produced its input. Null: the
  // legacy default stream.
  void set_stream(void* stream) override { stream_ = stream; }
  // The collectives are asynchronous on the stream, like the backend's kernels.
  void all_reduce_sum(float* data, int64_t count) override;
  void all_reduce(void* data, DType dtype, int64_t count) override;
  void all_gather(const float* send, float* recv, int64_t count) override;
  void barrier() override;
  // ncclSend / ncclRecv on the stream (GPU memory to GPU memory, no host copy); finish does nothing:
  // the stream orders them with the kernels before and after.
  int64_t start_send(const void* data, DType dtype, int64_t count, int peer) override;
  int64_t start_recv(void* data, DType dtype, int64_t count, int peer) override;

 private:
  friend std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(int world_size);
  friend std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(const std::vector<int>& devices);
  friend std::unique_ptr<NcclCommunicator> make_nccl_communicator_rank(const std::array<char, 128>& unique_id,
                                                                      int rank, int world_size, int device);
  NcclCommunicator(void* comm, int rank, int world_size, int device);

  void* comm_ = nullptr;  // ncclComm_t
  void* stream_ = nullptr;
  int rank_ = 0;
  int world_size_ = 1;
  int device_ = 0;
  float* scratch_ = nullptr;  // one float on the device, for barrier()
};

// The number of GPUs this process sees (after CUDA_VISIBLE_DEVICES); 0 when there is no driver.
int visible_cuda_devices();

// world_size communicators on devices 0 .. world_size-1 (index = rank), created together in this
// process (ncclCommInitAll). Throws Error naming --tensor-parallel-size when fewer GPUs are visible.
std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(int world_size);
// One communicator per listed GPU (rank r on devices[r]): a pipeline stage's tensor-parallel group.
std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(const std::vector<int>& devices);

// NCCL's unique id (ncclUniqueId, 128 bytes): made once by rank 0 of a world spanning processes and
// sent to the others (over MPI, mpi_world.cpp).
using NcclUniqueIdBytes = std::array<char, 128>;
NcclUniqueIdBytes make_nccl_unique_id();
// This process's communicator in such a world: rank `rank` of world_size on GPU `device`
// (ncclCommInitRank; every rank must call it with the same id). Makes `device` the calling thread's
// current device.
std::unique_ptr<NcclCommunicator> make_nccl_communicator_rank(const NcclUniqueIdBytes& unique_id, int rank,
                                                              int world_size, int device);

}  // namespace cypris
