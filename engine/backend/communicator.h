// The collectives tensor parallelism needs between the ranks of one model: a sum all-reduce after
// the row-parallel layers, an all-gather of vocab-parallel logits, and a barrier. CpuCommunicator
// (in-process threads) and NcclCommunicator (one per GPU) implement it.
#pragma once

#include <cstdint>

namespace cypris {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: data[i] = sum over ranks of data[i], on every rank. data lives where this rank's
  // backend keeps its tensors (host memory for CPU ranks, device memory for GPU ranks).
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  // recv = [rank 0's send | rank 1's send | ...], world_size * count elements, on every rank.
  virtual void all_gather(const float* send, float* recv, int64_t count) = 0;
  virtual void barrier() = 0;
};

}  // namespace cypris
