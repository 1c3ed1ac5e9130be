// The in-process Communicator for CPU ranks (threads of one process): the ranks share a group
// object that holds each rank's buffer pointers and a reusable barrier. Sums are taken in rank
// order for every element, so results never depend on thread timing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/backend/communicator.h"

namespace cypris {

// Shared by the world_size ranks of one group.
class CpuCommGroup {
 public:
  explicit CpuCommGroup(int world_size);
  int world_size() const { return world_size_; }

  // Blocks until every rank arrived. Throws Error when the group was aborted (a rank failed),
  // so the other ranks do not wait forever.
  void arrive_and_wait();
  // Wakes every waiting rank with an Error; later calls fail at once until reset().
  void abort();
  // Re-arms an aborted group. Only when no rank is inside a collective.
  void reset();

  // Per-rank pointers published before a barrier (the collective's inputs and outputs).
  std::vector<float*> recv;
  std::vector<const float*> send;

 private:
  int world_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

class CpuCommunicator : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<CpuCommGroup> group, int rank);
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  void all_reduce_sum(float* data, int64_t count) override;
  void all_gather(const float* send, float* recv, int64_t count) override;
  void barrier() override { group_->arrive_and_wait(); }

 private:
  std::shared_ptr<CpuCommGroup> group_;
  int rank_;
};

// One group and its world_size communicators (index = rank).
std::vector<std::unique_ptr<CpuCommunicator>> make_cpu_communicators(int world_size,
                                                                     std::shared_ptr<CpuCommGroup>* group = nullptr);

}  // namespace cypris
