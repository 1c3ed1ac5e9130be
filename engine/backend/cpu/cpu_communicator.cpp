#include "engine/backend/cpu/cpu_communicator.h"

#include <cstring>

#include "engine/common/error.h"

namespace cypris {

CpuCommGroup::CpuCommGroup(int world_size)
    : recv(static_cast<size_t>(world_size)), send(static_cast<size_t>(world_size)), world_size_(world_size) {
  CYPRIS_CHECK(world_size >= 1, "communicator world size {} must be at least 1", world_size);
}

void CpuCommGroup::arrive_and_wait() {
  std::unique_lock lock(mu_);
  CYPRIS_CHECK(!aborted_, "tensor parallel group aborted: another rank failed");
  const uint64_t gen = generation_;
  if (++arrived_ == world_size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  CYPRIS_CHECK(generation_ != gen, "tensor parallel group aborted: another rank failed");
}

void CpuCommGroup::abort() {
  std::lock_guard lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void CpuCommGroup::reset() {
  std::lock_guard lock(mu_);
  aborted_ = false;
  arrived_ = 0;
  ++generation_;
}

CpuCommunicator::CpuCommunicator(std::shared_ptr<CpuCommGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  CYPRIS_CHECK(group_ && rank >= 0 && rank < group_->world_size(), "communicator rank {} outside world size {}", rank,
               group_ ? group_->world_size() : 0);
}

void CpuCommunicator::all_reduce_sum(float* data, int64_t count) {
  const int n = group_->world_size();
  if (n == 1 || count <= 0) return;
  group_->recv[rank_] = data;
  group_->arrive_and_wait();  // every rank's buffer is published
  // Each rank reduces its own chunk of elements and writes the sum into every rank's buffer;
  // nobody else touches that chunk until the barrier below.
  const int64_t chunk = (count + n - 1) / n;
  const int64_t begin = std::min(count, chunk * rank_);
  const int64_t end = std::min(count, begin + chunk);
  float* const* bufs = group_->recv.data();
  for (int64_t i = begin; i < end; ++i) {
    float s = bufs[0][i];
    for (int r = 1; r < n; ++r) s += bufs[r][i];
    for (int r = 0; r < n; ++r) bufs[r][i] = s;
  }
  group_->arrive_and_wait();  // every chunk is written before any rank reads its buffer again
}

void CpuCommunicator::all_gather(const float* send, float* recv, int64_t count) {
  const int n = group_->world_size();
  if (count <= 0) return;
  group_->send[rank_] = send;
  group_->arrive_and_wait();
  for (int r = 0; r < n; ++r) {
    if (recv + r * count == group_->send[r]) continue;  // gathered in place
    std::memcpy(recv + r * count, group_->send[r], static_cast<size_t>(count) * sizeof(float));
  }
  group_->arrive_and_wait();  // senders keep their buffers until everyone has copied
}

std::vector<std::unique_ptr<CpuCommunicator>> make_cpu_communicators(int world_size,
                                                                     std::shared_ptr<CpuCommGroup>* group) {
  auto g = std::make_shared<CpuCommGroup>(world_size);
  std::vector<std::unique_ptr<CpuCommunicator>> out;
  for (int r = 0; r < world_size; ++r) out.push_back(std::make_unique<CpuCommunicator>(g, r));
  if (group) *group = g;
  return out;
}

}  // namespace cypris
