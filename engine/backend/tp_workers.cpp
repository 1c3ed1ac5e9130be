#include "engine/backend/tp_workers.h"

#include "engine/common/error.h"
#include "engine/backend/cpu/cpu_communicator.h"
#ifdef CYPRIS_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/backend/cuda/nccl_communicator.h"
#endif

namespace cypris {

void check_tensor_parallel(const ModelConfig& cfg, int tp) {
  CYPRIS_CHECK(tp >= 1, "--tensor-parallel-size {} must be at least 1", tp);
  if (tp == 1) return;
  CYPRIS_CHECK(cfg.num_attention_heads % tp == 0,
               "--tensor-parallel-size {} must divide the number of attention heads ({}, {})", tp,
               cfg.num_attention_heads, cfg.source);
  const int kv = cfg.num_key_value_heads;
  CYPRIS_CHECK(kv % tp == 0 || tp % kv == 0,
               "--tensor-parallel-size {} must divide the number of KV heads ({}) or be a multiple of it ({})", tp, kv,
               cfg.source);
  CYPRIS_CHECK(cfg.intermediate_size % tp == 0,
               "--tensor-parallel-size {} must divide the MLP intermediate_size ({}, {})", tp, cfg.intermediate_size,
               cfg.source);
}

void check_gpu_count(int tp, int visible_gpus) {
  CYPRIS_CHECK(visible_gpus >= tp,
               "--tensor-parallel-size {} needs {} GPUs, but only {} {} visible (check CUDA_VISIBLE_DEVICES)", tp, tp,
               visible_gpus, visible_gpus == 1 ? "is" : "are");
}

int kv_heads_per_rank(int num_kv_heads, int tp) {
  return num_kv_heads >= tp ? num_kv_heads / tp : 1;
}

int first_kv_head(int num_kv_heads, int rank, int tp) {
  // Replicated: rank r's query heads [r Hq/tp, (r+1) Hq/tp) all share KV head r Hkv / tp.
  return num_kv_heads >= tp ? rank * (num_kv_heads / tp) : rank * num_kv_heads / tp;
}

TpWorkers::TpWorkers(std::vector<std::unique_ptr<Communicator>> comms, std::function<void()> on_abort,
                     std::function<void()> on_reset, std::function<void(int)> thread_init)
    : comms_(std::move(comms)),
      on_abort_(std::move(on_abort)),
      on_reset_(std::move(on_reset)),
      thread_init_(std::move(thread_init)),
      init_errors_(comms_.size()) {
  CYPRIS_CHECK(!comms_.empty(), "tensor parallel workers need at least one rank");
  for (int r = 0; r < world_size(); ++r) {
    CYPRIS_CHECK(comms_[r]->rank() == r && comms_[r]->world_size() == world_size(), "communicator {} has rank {} of {}",
                 r, comms_[r]->rank(), comms_[r]->world_size());
  }
  for (int r = 0; r < world_size(); ++r) threads_.emplace_back([this, r] { loop(r); });
}

std::unique_ptr<TpWorkers> TpWorkers::cpu(int world_size) {
  std::shared_ptr<CpuCommGroup> group;
  auto cpu_comms = make_cpu_communicators(world_size, &group);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& c : cpu_comms) comms.push_back(std::move(c));
  return std::make_unique<TpWorkers>(
      std::move(comms), [group] { group->abort(); }, [group] { group->reset(); });
}

TpWorkers::~TpWorkers() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void TpWorkers::run(const std::function<void(int)>& fn) {
  std::unique_lock lock(mu_);
  job_ = &fn;
  first_error_ = nullptr;
  pending_ = world_size();
  ++job_generation_;
  work_cv_.notify_all();
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (first_error_) {
    // Every rank has left its collectives: the group can be re-armed for the next step.
    if (on_reset_) on_reset_();
    std::exception_ptr e = first_error_;
    first_error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void TpWorkers::loop(int rank) {
  if (thread_init_) {
    try {
      thread_init_(rank);
    } catch (...) {
      init_errors_[rank] = std::current_exception();  // reported by the first run()
    }
  }
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || job_generation_ != seen; });
      if (stop_) return;
      seen = job_generation_;
      job = job_;
    }
    try {
      if (init_errors_[rank]) std::rethrow_exception(init_errors_[rank]);
      (*job)(rank);
    } catch (...) {
      bool first = false;
      {
        std::lock_guard lock(mu_);
        if (!first_error_) {
          first_error_ = std::current_exception();
          first = true;
        }
      }
      // Outside the lock: ranks blocked in a collective must wake up and fail too.
      if (first && on_abort_) on_abort_();
    }
    std::lock_guard lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

std::unique_ptr<TpWorkers> make_tp_workers(Device device, int world_size) {
  if (device == Device::Cpu) return TpWorkers::cpu(world_size);
#ifdef CYPRIS_HAVE_CUDA
  auto nccl = make_nccl_communicators(world_size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& c : nccl) comms.push_back(std::move(c));
  // No on_abort: NCCL cannot wake a rank blocked in a collective short of destroying the
  // communicator, so a GPU rank failing alone mid-step leaves the others blocked (known
  // limitation, docs/distributed.md; batches are validated before they reach the ranks).
  return std::make_unique<TpWorkers>(std::move(comms), nullptr, nullptr, [](int rank) {
    const cudaError_t e = cudaSetDevice(rank);
    CYPRIS_CHECK(e == cudaSuccess, "tensor parallel rank {}: cudaSetDevice failed: {}", rank, cudaGetErrorString(e));
  });
#else
  CYPRIS_FAIL("--tensor-parallel-size {} on GPUs needs the CUDA build", world_size);
#endif
}

}  // namespace cypris
