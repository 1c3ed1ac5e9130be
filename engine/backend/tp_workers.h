// Tensor-parallel rank workers: one thread per rank of one process, each running the same step on
// its own shard (backend, model slice, KV-cache slice) and meeting the others in the
// communicator's collectives. With pipeline stages, rank s * tp + t is tensor-parallel rank t of
// stage s: the ranks of a stage share a communicator group, and all ranks meet at barrier_all()
// between the pipeline's ticks. Also the start-up checks of a tensor-parallel layout.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/common/tensor.h"  // Device
#include "engine/loader/model_config.h"
#include "engine/backend/communicator.h"

namespace cypris {

// Throws Error naming --tensor-parallel-size unless tp divides the attention heads and the MLP
// width, and the KV heads either divide over tp or tp is a multiple of them (then each KV head is
// replicated on tp / num_kv_heads ranks). The vocabulary may split unevenly.
void check_tensor_parallel(const ModelConfig& cfg, int tp);
// Throws Error when fewer GPUs are visible than tensor-parallel ranks.
void check_gpu_count(int tp, int visible_gpus);
// KV heads one rank holds: num_kv_heads / tp, or 1 when they are replicated (tp > num_kv_heads).
int kv_heads_per_rank(int num_kv_heads, int tp);
// The first (full-model) KV head index held by `rank`.
int first_kv_head(int num_kv_heads, int rank, int tp);

class TpWorkers {
 public:
  // One thread per communicator (comms[r] has rank r % its group's size: one group, or one per
  // pipeline stage of equal size). on_abort wakes ranks blocked in a
  // collective when another rank failed; on_reset re-arms the group after such a step (either may
  // be empty). thread_init(rank) runs first on each rank's thread (a GPU rank selects its device
  // there, so everything the rank creates later lives on it).
  TpWorkers(std::vector<std::unique_ptr<Communicator>> comms, std::function<void()> on_abort,
            std::function<void()> on_reset, std::function<void(int rank)> thread_init = nullptr);
  // world_size ranks joined by an in-process CpuCommunicator.
  static std::unique_ptr<TpWorkers> cpu(int world_size);
  ~TpWorkers();
  TpWorkers(const TpWorkers&) = delete;
  TpWorkers& operator=(const TpWorkers&) = delete;

  int world_size() const { return static_cast<int>(comms_.size()); }
  Communicator& comm(int rank) { return *comms_.at(static_cast<size_t>(rank)); }
  // The communicator over all ranks (every stage) that carries the hand-offs between pipeline
  // stages device to device (NCCL send / recv when every stage is a GPU stage); null when the
  // hand-offs go through host memory.
  Communicator* pipe_comm(int rank) {
    return pipe_comms_.empty() ? nullptr : pipe_comms_.at(static_cast<size_t>(rank)).get();
  }
  void set_pipe_comms(std::vector<std::unique_ptr<Communicator>> comms) { pipe_comms_ = std::move(comms); }

  // Runs fn(rank) on every rank's thread at once and waits for all of them. When a rank throws,
  // the others are woken from their collectives and the first error is rethrown here; the group
  // is usable again for the next call. Not reentrant: one caller at a time.
  void run(const std::function<void(int rank)>& fn);

  // Inside run(): waits until every rank of the workers (all stages) arrived. Throws Error when a
  // rank failed during this run, so no rank waits forever.
  void barrier_all();

 private:
  void loop(int rank);
  void abort_barrier();

  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<Communicator>> pipe_comms_;  // empty unless every stage is on a GPU
  std::function<void()> on_abort_, on_reset_;
  std::function<void(int)> thread_init_;
  std::vector<std::exception_ptr> init_errors_;  // per rank, from thread_init
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t job_generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr first_error_;
  std::mutex barrier_mu_;
  std::condition_variable barrier_cv_;
  int barrier_arrived_ = 0;
  uint64_t barrier_generation_ = 0;
  bool barrier_aborted_ = false;
};

// The workers for world_size ranks on `device`: in-process CpuCommunicators for CPU ranks; in the
// CUDA build, NCCL communicators on GPUs 0 .. world_size-1 with each thread bound to its GPU
// (throws Error naming --tensor-parallel-size when fewer GPUs are visible).
std::unique_ptr<TpWorkers> make_tp_workers(Device device, int world_size);

// The workers of pipeline stages: stage_devices.size() stages of tp ranks each, rank s * tp + t on
// stage_devices[s]. CPU stages join their ranks by in-process communicators; GPU stages by NCCL
// over the GPUs gpu_of_rank[r] (one per rank of the stage, the thread bound to it). When every stage
// is a GPU stage, one more NCCL communicator over all the ranks' GPUs carries the hand-offs
// (pipe_comm: rank s * tp + t sends to s * tp + t + tp, GPU to GPU).
std::unique_ptr<TpWorkers> make_pipeline_workers(const std::vector<Device>& stage_devices, int tp,
                                                 const std::vector<int>& gpu_of_rank);

}  // namespace cypris
