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
    const int group = comms_[r]->world_size();
    CYPRIS_CHECK(group >= 1 && world_size() % group == 0 && comms_[r]->rank() == r % group,
                 "communicator {} has rank {} of {}", r, comms_[r]->rank(), group);
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
  {
    std::lock_guard barrier_lock(barrier_mu_);
    barrier_arrived_ = 0;
    barrier_aborted_ = false;
  }
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
      if (first) abort_barrier();
    }
    std::lock_guard lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void TpWorkers::barrier_all() {
  std::unique_lock lock(barrier_mu_);
  CYPRIS_CHECK(!barrier_aborted_, "pipeline barrier: another rank failed");
  const uint64_t gen = barrier_generation_;
  if (++barrier_arrived_ == world_size()) {
    barrier_arrived_ = 0;
    ++barrier_generation_;
    barrier_cv_.notify_all();
    return;
  }
  barrier_cv_.wait(lock, [&] { return barrier_generation_ != gen || barrier_aborted_; });
  CYPRIS_CHECK(barrier_generation_ != gen, "pipeline barrier: another rank failed");
}

void TpWorkers::abort_barrier() {
  {
    std::lock_guard lock(barrier_mu_);
    barrier_aborted_ = true;
  }
  barrier_cv_.notify_all();
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

std::unique_ptr<TpWorkers> make_pipeline_workers(const std::vector<Device>& stage_devices, int tp,
                                                 const std::vector<int>& gpu_of_rank) {
  CYPRIS_CHECK(!stage_devices.empty() && tp >= 1, "pipeline workers: {} stages of {} ranks", stage_devices.size(), tp);
  CYPRIS_CHECK(gpu_of_rank.size() == stage_devices.size() * static_cast<size_t>(tp),
               "pipeline workers: {} GPU ids for {} ranks", gpu_of_rank.size(), stage_devices.size() * tp);
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::shared_ptr<CpuCommGroup>> groups;
  for (size_t s = 0; s < stage_devices.size(); ++s) {
    if (stage_devices[s] == Device::Cuda && tp > 1) {
#ifdef CYPRIS_HAVE_CUDA
      std::vector<int> devices(gpu_of_rank.begin() + static_cast<ptrdiff_t>(s * tp),
                               gpu_of_rank.begin() + static_cast<ptrdiff_t>((s + 1) * tp));
      for (auto& c : make_nccl_communicators(devices)) comms.push_back(std::move(c));
      continue;
#else
      CYPRIS_FAIL("pipeline stage {} on GPUs needs the CUDA build", s);
#endif
    }
    // CPU ranks, or a GPU stage of one rank (no collectives): an in-process group.
    std::shared_ptr<CpuCommGroup> group;
    for (auto& c : make_cpu_communicators(tp, &group)) comms.push_back(std::move(c));
    groups.push_back(group);
  }
  auto abort = [groups] {
    for (auto& g : groups) g->abort();
  };
  auto reset = [groups] {
    for (auto& g : groups) g->reset();
  };
  std::function<void(int)> init;
  bool any_gpu = false;
  for (Device d : stage_devices) any_gpu = any_gpu || d == Device::Cuda;
  if (any_gpu) {
#ifdef CYPRIS_HAVE_CUDA
    init = [stage_devices, tp, gpu_of_rank](int rank) {
      if (stage_devices[static_cast<size_t>(rank / tp)] != Device::Cuda) return;
      const int gpu = gpu_of_rank[static_cast<size_t>(rank)];
      const cudaError_t e = cudaSetDevice(gpu);
      CYPRIS_CHECK(e == cudaSuccess, "pipeline rank {}: cudaSetDevice({}) failed: {}", rank, gpu,
                   cudaGetErrorString(e));
    };
#else
    CYPRIS_FAIL("pipeline stages on GPUs need the CUDA build");
#endif
  }
  auto workers = std::make_unique<TpWorkers>(std::move(comms), std::move(abort), std::move(reset), std::move(init));
  bool all_gpu = stage_devices.size() > 1;
  for (Device d : stage_devices) all_gpu = all_gpu && d == Device::Cuda;
  if (all_gpu) {
#ifdef CYPRIS_HAVE_CUDA
    std::vector<std::unique_ptr<Communicator>> pipe;
    for (auto& c : make_nccl_communicators(gpu_of_rank)) pipe.push_back(std::move(c));
    workers->set_pipe_comms(std::move(pipe));
#endif
  }
  return workers;
}

}  // namespace cypris
