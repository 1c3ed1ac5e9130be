// ModelRunner: owns the backend, the model and the paged KV cache, and runs one flattened batch
// (BatchContext) to logits (StepLogits, left on the device). The engine core calls execute() once
// per step, then samples rows on the device and/or downloads the others. With tensor
// parallelism (parallel.world_size > 1) it owns one shard of each per rank, runs the ranks on
// worker threads (tp_workers.h) and returns rank 0's logits. With pipeline stages (-pp, or
// --gpu-layers: a GPU stage and a CPU stage) each stage holds consecutive decoder layers and their
// KV cache on its own ranks (rank s * tp + t); a step's batch is cut into micro-batches that move
// through the stages like a bucket brigade, and the logits come from the last stage's rank 0.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_cache_manager.h"  // BlockCopy
#include "engine/loader/lora_adapter.h"
#include "engine/loader/model_config.h"
#include "engine/loader/weights.h"
#include "engine/runtime/decode_graphs.h"
#include "engine/scheduler/batch_context.h"
#include "models/layers/lora.h"
#include "models/model.h"

namespace cypris {

class TpWorkers;
struct WeightOffloadPlan;
class Communicator;
struct SampleOutput;
struct SamplerRow;

struct ModelRunnerOptions {
  std::filesystem::path model_dir;  // a local folder with config.json (+ weights unless load_format is dummy)
  LoadOptions load;
  int threads = 0;          // CPU backend threads in all (split between ranks); <= 0: one per hardware thread
  // The model's config when the caller already loaded it (the engine does, to size the scheduler);
  // unset: read from model_dir with load.overrides.
  std::optional<ModelConfig> config;
  int block_size = 16;      // tokens per KV-cache block
  // The KV cache, sized here for every device: num_blocks when > 0; else on a GPU from
  // gpu_memory_utilization; else cpu_kv_cache_bytes / the bytes of a block when > 0
  // (--cpu-kvcache-space); else one sequence of max_model_len.
  int64_t num_blocks = 0;
  double cpu_kv_cache_bytes = 0;
  ParallelConfig parallel;  // world_size = --tensor-parallel-size (of each stage); rank is ignored
  // Pipeline stages (--pipeline-parallel-size): stage s holds layers [s L / P, (s + 1) L / P), or
  // stage_layers[s] layers when given (they must add up to L); each stage runs on stage_devices[s]
  // ("cpu" / "cuda"; empty: `device` for all).
  int pipeline_stages = 1;
  std::vector<int> stage_layers;
  std::vector<std::string> stage_devices;
  // --gpu-layers: the first N decoder layers (and their KV cache) on the GPU, the rest with the LM
  // head on the CPU, as two stages; -1: as many as fit in --gpu-memory-utilization after a KV cache
  // of max_model_len tokens (0 without a GPU). nullopt: no split.
  std::optional<int> gpu_layers;
  // --cpu-offload-gb: on each GPU, this many GiB of its decoder layers' weights (the last layers it
  // holds) stay in pinned host memory and are streamed to it before each use
  // (engine/backend/weight_offload_plan.h); the CPU's stages ignore it. 0: none.
  double cpu_offload_gb = 0;
  // Micro-batches a step is cut into when there are several stages (at most one per sequence):
  // 0 = one per stage; 1 = none (the stages take turns).
  int micro_batches = 0;
  // The tensor-parallel ranks are the processes of the MPI world (--distributed-executor-backend mpi,
  // one rank per process; mpi_worker.h): process 0 returns from the constructor and drives the
  // others, which never return from it (they serve steps until process 0 stops them, then exit).
  // --threads is then per process. With pipeline_stages P, process r holds rank (r / tp, r % tp) of
  // stage r / tp (pipeline_ranks.h); stage_devices and gpu_layers are refused with mpi.
  bool mpi = false;
  std::string device = "cpu";   // auto | cuda | cpu (backend_factory.h)
  bool cuda_fp32_gemm = false;  // CUDA: fp32 GEMMs for 16-bit weights (CPU numerics; for tests)
  // CUDA with num_blocks == 0: the KV cache takes what is left of this fraction of device memory
  // after the weights, the profiled activations of a step of max_num_batched_tokens tokens over
  // min(max_num_seqs, tokens) sequences, and the CUDA graphs' memory (memory_profile.h).
  double gpu_memory_utilization = 0.9;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 256;
  // CUDA at tp 1 without enforce_eager: decode batches of up to max_num_seqs sequences with
  // contexts up to max_seq_len_to_capture replay CUDA graphs captured at load (decode_graphs.h).
  bool enforce_eager = true;
  int64_t max_seq_len_to_capture = 8192;
  // Speculative decoding: graphs also for decodes verifying drafts, up to this many query tokens
  // per sequence (k + 1; 1 without speculation).
  int graph_max_query_len = 1;
  // KV cache element type: F32, F16, BF16, or F8E4M3 / F8E5M2 (parse_kv_cache_dtype in
  // engine/config/kv_cache_dtype.h); nullopt ("auto") = the activation dtype.
  // --quantization-param-path for the fp8 scales ("" = none).
  std::optional<DType> kv_cache_dtype;
  std::string quantization_param_path;
  // --enable-lora: adapter slots for up to max_loras adapters of rank <= max_lora_rank
  // (models/layers/lora.h). 0: no LoRA.
  int max_loras = 0;
  int64_t max_lora_rank = 16;
};

// Rank 0's logits of one step where the forward pass left them (device memory on a GPU backend,
// host memory on the CPU backend): [logits_indices.size(), vocab] fp32. Valid until the next
// execute_step(). The engine reads it per row: sample_on_device() for the rows the GPU sampler takes,
// download() for the others (CPU sampling, beam search, prompt logprobs).
struct StepLogits {
  Tensor view;                    // [rows, vocab] fp32
  std::shared_ptr<void> storage;  // keeps an eager forward's output alive (a graph replay's is the graph's)
  int64_t rows() const { return view.ndim() == 2 ? view.shape[0] : 0; }
  int64_t vocab() const { return view.ndim() == 2 ? view.shape[1] : 0; }
};

// Time the pipeline stages spent working, for the utilisation the benchmarks print.
struct StageStats {
  int first_layer = 0;  // the stage's decoder layers [first_layer, end_layer)
  int end_layer = 0;
  std::string device;          // "cpu" / "cuda"
  double busy_seconds = 0;     // running its micro-batches (tp rank 0)
};

// Logits of the requested rows, fp32 on the host.
struct Logits {
  std::vector<float> data;  // [rows, vocab]
  int64_t rows = 0;
  int64_t vocab = 0;
  const float* row(int64_t r) const { return data.data() + r * vocab; }
};

class ModelRunner {
 public:
  // Loads config, weights and model and allocates the KV cache. Throws Error on bad input.
  explicit ModelRunner(const ModelRunnerOptions& options);
  ~ModelRunner();

  // Writes the batch's K/V into the cache and returns the logits [logits_indices.size(), vocab],
  // left where the backend computed them (the engine's step).
  StepLogits execute_step(const BatchContext& batch);
  // execute_step and download of every row (tools and tests).
  Logits execute(const BatchContext& batch);
  // Host copies of rows [first_row, first_row + num_rows) of a step's logits.
  Logits download(const StepLogits& logits, int64_t first_row, int64_t num_rows);

  // GPU sampling (engine/sampling/gpu_sampling.h): true when rank 0 runs on a CUDA device and the
  // environment does not switch it off (CYPRIS_GPU_SAMPLING=0, for comparisons).
  bool can_sample_on_device() const;
  // Samples logits rows [first_row, first_row + rows.size()) for rows[i] with the GPU sampler; only
  // tokens and logprobs come back (as Sampler::sample returns them; each token is appended to its
  // row's state). Every row must pass gpu_sampling_supported (Error otherwise).
  std::vector<SampleOutput> sample_on_device(const StepLogits& logits, int64_t first_row,
                                             std::span<const SamplerRow> rows, int max_log_probs);

  const ModelConfig& config() const { return rank0_model()->config(); }
  DType weight_dtype() const { return weight_dtype_; }
  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int tensor_parallel_size() const { return tp_; }
  int pipeline_parallel_size() const { return static_cast<int>(stages_.size()); }
  // Per stage: its layers, device and busy time over the steps so far; pipeline_seconds() is the
  // wall time of those steps (so busy / wall is the stage's utilisation).
  std::vector<StageStats> stage_stats() const;
  double pipeline_seconds() const { return pipeline_seconds_; }
  // Number of decode CUDA graphs captured (0 when running eagerly).
  int num_cuda_graphs() const { return ranks_.front().graphs ? ranks_.front().graphs->num_graphs() : 0; }
  DType kv_cache_dtype() const { return kv_cache_dtype_; }
  // Waits for the work queued on every rank's device (profiling).
  void synchronize() {
    for (auto& r : ranks_) r.backend->synchronize();
  }
  // Element type of the activations on rank 0's backend (the model dtype on a GPU, F32 on the CPU).
  DType activation_dtype() const { return activation_dtype_; }
  // K and V of every layer for one block, summed over the ranks (4 bytes per element for fp32, 1 for
  // fp8; memory_profile.h): for sizing the cache and the swap pool from a memory budget.
  int64_t kv_cache_bytes_per_block() const { return kv_block_bytes_; }
  // Rank 0's backend and model shard (the first pipeline stage's).
  Backend& backend() { return *ranks_.front().backend; }
  Model& model() { return *ranks_.front().model; }
  // The intermediates of tp rank 0 of every stage (its slices at tp > 1), called on that rank's
  // thread, one stage after the other (a step with a hook is not micro-batched). On a GPU backend
  // the hook receives host copies of the (2-D fp32) intermediates.
  void set_debug_hook(DebugHook hook);

  // LoRA (with options.max_loras > 0): whether it is on, the check that an adapter fits the model
  // (Error naming module and shapes), writing an adapter into slot [0, max_loras) on every rank, and
  // emptying a slot. A batch's lora_slots name these slots.
  bool lora_enabled() const { return max_loras_ > 0; }
  int max_loras() const { return max_loras_; }
  void check_lora(const LoraAdapter& adapter) const;
  void load_lora(int slot, const LoraAdapter& adapter);
  // Allocates the device weights the adapter's modules need (LoraSites::reserve) on every rank.
  void reserve_lora(const LoraAdapter& adapter);
  void clear_lora(int slot);
  // Device bytes the adapters' stacked weights take on rank 0.
  size_t lora_device_bytes() const;

  // KV block moves the scheduler asks for before a step (kv_block_ops.cpp). Pairs are
  // (src, dst) block ids: swap_out copies cache -> swap pool, swap_in pool -> cache, copy_blocks
  // cache -> cache (copy-on-write after a fork).
  void allocate_swap_space(int64_t num_cpu_blocks);
  void swap_out(std::span<const BlockCopy> pairs);
  void swap_in(std::span<const BlockCopy> pairs);
  void copy_blocks(std::span<const BlockCopy> pairs);
  int64_t num_swap_blocks() const { return num_swap_blocks_; }
  // --context-shift by rotation: whether the cached keys can be turned to new positions (every
  // layer rotates by one position-only table: a family known to, rope scaling none, linear, llama3
  // or yarn, no sliding window, one process), and the token moves of a step (each key rotated by
  // the table's angle at new_pos minus that at old_pos, on every rank and layer).
  bool can_rotate_kv() const;
  void move_kv_slots(std::span<const KvSlotMove> moves);

 private:
  // One pipeline stage: its layers and device, the types of its activations and cache, the bytes
  // of one KV block of its layers over its tp ranks.
  struct Stage {
    int first_layer = 0;
    int end_layer = 0;
    Device device = Device::Cpu;
    DType activation_dtype = DType::F32;
    DType kv_dtype = DType::F32;
    int64_t kv_block_bytes = 0;
    double busy_seconds = 0;
  };
  // One tensor-parallel rank's share (the only one at world size 1) of one stage.
  struct Rank {
    int stage = 0;
    int tp_rank = 0;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<LoraSites> lora;  // --enable-lora; the model's layers point into it
    std::unique_ptr<Model> model;
    std::vector<KvCacheLayer> kv_cache;
    std::vector<KvCacheScales> kv_scales;  // per layer (fp8 cache)
    std::vector<DeviceTensor> swap_k, swap_v;  // per layer [num_swap_blocks, block_size, kv_heads, head_dim], host
    std::unique_ptr<DecodeGraphRunner> graphs;  // last: released before the backend and the cache
  };
  const Model* rank0_model() const { return ranks_.front().model.get(); }
  // The stages' layers and devices from the options (stage_layers / stage_devices / gpu_layers).
  void plan_stages(const ModelRunnerOptions& options, const ModelConfig& cfg);
  int auto_gpu_layers(const ModelRunnerOptions& options, const ModelConfig& cfg);
  void size_kv_cache(const ModelRunnerOptions& options, const ModelConfig& cfg);
  void build_rank(const ModelRunnerOptions& options, const ModelConfig& cfg, int rank, int threads, int gpu);
  void allocate_kv_cache(Rank& r, const ModelConfig& cfg);
  // The load log's --cpu-offload-gb lines for a GPU rank (the plan, and what the backend placed).
  void log_weight_offload(double gib, const WeightOffloadPlan& plan, Rank& r);
  int64_t blocks_from_device_memory(const ModelConfig& cfg, const ModelRunnerOptions& options, int stage);
  // Peak activation bytes (tp rank 0 of `stage`) of one eager forward of b over a one-block cache
  // per layer.
  size_t profile_peak(const ModelConfig& cfg, const BatchContext& b, int stage);
  void capture_graphs();
  // Runs the batch on every rank (through the stages); fills *out with the logits when not null.
  void run_batch(const BatchContext& batch, StepLogits* out, int micro_batches);
  // The stages' ticks: stage s runs micro-batch k at tick s + k.
  void run_pipeline(const BatchContext& batch, StepLogits* out, int micro_batches);
  // The same across MPI processes (this process holds one stage's rank): each micro-batch's hand-off
  // goes to the next stage's process as it is ready (pipeline_ranks.h), without a barrier between
  // ticks; process 0 receives the logits rows.
  void run_pipeline_processes(const BatchContext& batch, StepLogits* out, int micro_batches);
  // Whether this process holds ranks of stage s (every stage in one process; one under MPI).
  bool holds_stage(int s) const;
  // Runs the batch on one rank; fills *out with the logits when out is not null (the logits rank).
  void forward_rank(Rank& r, const BatchContext& batch, const StageHandoff* in, StageHandoff* handoff,
                    StepLogits* out);
  // The rank whose backend holds the step's logits: the last stage's rank 0, or under MPI with
  // stages this process's rank (process 0 receives the logits in host memory).
  Rank& logits_rank() {
    return pipe_comm_ ? ranks_.front() : ranks_[static_cast<size_t>(pipeline_parallel_size() - 1) * tp_];
  }
  // Runs fn(rank) on every rank: on the worker threads at tp > 1, else right here.
  void for_each_rank(const std::function<void(Rank&)>& fn);
  // Runs fn on the logits rank's thread (its device is current there).
  void on_logits_rank(const std::function<void()>& fn);

  std::vector<Stage> stages_;
  int micro_batches_ = 1;
  double pipeline_seconds_ = 0;
  // MPI: this process's tensor-parallel rank (first_rank_) and its communicator to the other
  // processes; drives_processes_ on process 0, which sends every step and block move to the others.
  std::unique_ptr<Communicator> process_comm_;  // outlives the ranks' models (the stage's tp group)
  // MPI with pipeline stages: the world, for the hand-offs (NCCL on GPUs) and the logits (MPI, host
  // memory; logits_comm_ is null when pipe_comm_ is an MPI communicator already).
  std::unique_ptr<Communicator> pipe_comm_;
  std::unique_ptr<Communicator> logits_comm_;
  int tp_ = 1;
  int first_rank_ = 0;
  bool drives_processes_ = false;
  std::vector<float> rope_host_;  // --context-shift by rotation: the rope table, built at the first shift
  std::vector<Rank> ranks_;
  std::unique_ptr<TpWorkers> workers_;  // null with one rank in this process (also under MPI)
  DType weight_dtype_ = DType::F32;
  int block_size_ = 16;
  DType kv_cache_dtype_ = DType::F32;
  DType activation_dtype_ = DType::F32;
  std::string kv_scales_source_;  // rank 0's, for the load log
  int64_t num_blocks_ = 0;
  int64_t kv_block_bytes_ = 0;
  int64_t num_swap_blocks_ = 0;
  int max_loras_ = 0;
  int64_t max_lora_rank_ = 16;
  DecodeGraphPolicy graph_policy_;  // enforce_eager unless graphs are in use
  bool debug_hook_ = false;         // a hook reads intermediates: graphs cannot replay
};

}  // namespace cypris
