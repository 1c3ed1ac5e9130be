#include "engine/runtime/model_runner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <tuple>
#include <thread>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/common/phase_timer.h"
#include "engine/config/kv_cache_dtype.h"
#include "engine/backend/backend_factory.h"
#include "engine/loader/gguf.h"
#include "engine/backend/layer_weight_hooks.h"
#include "engine/backend/weight_offload_plan.h"
#include "engine/runtime/batch_upload.h"
#include "engine/runtime/layer_weight_bytes.h"
#include "engine/runtime/memory_profile.h"
#include "engine/runtime/micro_batches.h"
#include "engine/runtime/pipeline_ranks.h"
#include "engine/runtime/kv_cache_scales.h"
#include "engine/backend/tp_workers.h"
#include "kernels/cpu/attention.h"  // is_kv_cache_dtype
#include "engine/backend/mpi_world.h"
#include "engine/runtime/mpi_worker.h"
#include "engine/sampling/gpu_sampling.h"
#include "models/registry/registry.h"

namespace cypris {
namespace {

// One zero adapter of rank 1 per projection LoRA may adapt in a dense model (q/k/v/o, Phi-3's fused
// qkv, gate/up/down, fused gate_up), shaped from the config; only shapes are read. Reserving them
// allocates the stacked weights of every site the model has (a probe the model lacks, or of another
// shape, is refused by LoraSites::check and skipped): CUDA graphs capture only the sites allocated
// before the capture.
std::vector<LoraAdapter> lora_site_probes(const ModelConfig& cfg) {
  const int64_t h = cfg.hidden_size, d = cfg.head_dim, q = int64_t{cfg.num_attention_heads} * d,
                kv = int64_t{cfg.num_key_value_heads} * d, ff = cfg.intermediate_size;
  const std::vector<std::tuple<const char*, int64_t, int64_t>> shapes = {
      {"self_attn.q_proj", q, h},   {"self_attn.k_proj", kv, h},     {"self_attn.v_proj", kv, h},
      {"self_attn.o_proj", h, q},   {"self_attn.qkv_proj", q + 2 * kv, h}, {"mlp.gate_proj", ff, h},
      {"mlp.up_proj", ff, h},       {"mlp.down_proj", h, ff},        {"mlp.gate_up_proj", 2 * ff, h}};
  std::vector<LoraAdapter> out;
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    for (const auto& [name, rows, cols] : shapes) {
      LoraAdapter a;
      a.path = "(CUDA graph site probe)";
      a.rank = 1;
      LoraModule m;
      m.a.shape = {1, cols};
      m.b.shape = {rows, 1};
      a.modules.emplace("model.layers." + std::to_string(l) + "." + name, std::move(m));
      out.push_back(std::move(a));
    }
  }
  return out;
}

}  // namespace

ModelRunner::ModelRunner(const ModelRunnerOptions& options) {
  PhaseTimer startup("model start-up");  // one log line: where the start-up time went
  CYPRIS_CHECK(options.block_size > 0 && options.block_size <= 1024, "block size {} must be in [1, 1024]",
               options.block_size);
  // The one check of the tensor-parallel size along the engine's path: its range here, the model's
  // shapes in check_tensor_parallel, the GPU count where the communicators are made.
  const int tp = options.parallel.world_size;
  CYPRIS_CHECK(tp >= 1 && tp <= 256, "--tensor-parallel-size {} must be in [1, 256]", tp);
  tp_ = tp;
  const ModelConfig cfg =
      options.config ? *options.config : load_model_config(model_families(), options.model_dir, options.load.overrides);
  resolve_architecture(cfg);  // fail before reading any weights
  tp_ = tp;
  // MPI: this process is one rank; every process has the same config, or none starts (mpi_worker.h).
  MpiWorld* world = options.mpi ? &MpiWorld::instance() : nullptr;
  if (world) {
    first_rank_ = world->rank();
    drives_processes_ = world->rank() == 0;
    check_mpi_layout(*world, tp, options.pipeline_stages, cfg, options);
  }
  if (options.load.load_format != "dummy" && is_gguf_path(options.model_dir)) {
    // Which llama.cpp types the file holds ("Q4_K: 193 tensors, Q6_K: 33, F32: 65").
    const GgufModel gguf(options.model_dir);
    LOG_INFO("GGUF v{} {}: {}", gguf.main().version(), gguf.describe(), gguf_type_mix(gguf));
  }
  check_tensor_parallel(cfg, tp);
  weight_dtype_ = resolve_dtype(options.load.dtype, cfg.torch_dtype);
  block_size_ = options.block_size;
  max_loras_ = options.max_loras;
  max_lora_rank_ = options.max_lora_rank;
  // An adapter loads on process 0 between steps; the step messages do not carry it to the others.
  CYPRIS_CHECK(!(world && max_loras_ > 0),
               "--enable-lora with ranks in several processes (MPI) is not supported yet; use one process");
  // Each stage's model holds the LoRA sites of its layers only; loading an adapter across stages is not
  // written yet.
  CYPRIS_CHECK(!(max_loras_ > 0 && (options.pipeline_stages > 1 || !options.stage_layers.empty() || options.gpu_layers)),
               "--enable-lora with pipeline stages (--pipeline-parallel-size / --gpu-layers) is not supported yet");
  // Under MPI every process runs one rank of one stage, all on the same kind of device.
  CYPRIS_CHECK(!world || (options.stage_devices.empty() && !options.gpu_layers),
               "--gpu-layers with --distributed-executor-backend mpi: the GPU + CPU split runs in one process; "
               "across MPI processes every stage runs on --device");
  plan_stages(options, cfg);
  if (options.cpu_offload_gb != 0 &&
      std::none_of(stages_.begin(), stages_.end(), [](const Stage& st) { return st.device == Device::Cuda; })) {
    LOG_INFO("--cpu-offload-gb {} has no effect: no layer runs on a GPU (it offloads a GPU's weights)",
             options.cpu_offload_gb);
  }
  startup.mark("config");
  const int pp = pipeline_parallel_size();
  bool any_cuda = false;
  for (Stage& st : stages_) {
    // Activations in the model dtype on a GPU (fp32 accumulation inside the kernels, as vLLM); the
    // CPU backend and the fp32-GEMM equivalence mode keep fp32.
    const bool act16 = st.device == Device::Cuda && !options.cuda_fp32_gemm &&
                       (weight_dtype_ == DType::BF16 || weight_dtype_ == DType::F16);
    st.activation_dtype = act16 ? weight_dtype_ : DType::F32;
    any_cuda = any_cuda || st.device == Device::Cuda;
  }
  for (Stage& st : stages_) {
    // A CPU stage beside a GPU stage (--gpu-layers) keeps the CPU's float16 default cache.
    const DType fallback =
        st.device == Device::Cpu && (any_cuda || options.gpu_layers) ? DType::F16 : st.activation_dtype;
    st.kv_dtype = options.kv_cache_dtype.value_or(fallback);
    // What the attention kernels can store (kernels/cpu/attention.h); every --kv-cache-dtype name
    // parses to one of these (engine/config/kv_cache_dtype.h).
    CYPRIS_CHECK(is_kv_cache_dtype(st.kv_dtype), "KV cache dtype {} cannot hold a KV cache (--kv-cache-dtype: {})",
                 dtype_name(st.kv_dtype), fmt::join(kv_cache_dtype_names(), ", "));
    st.kv_block_bytes = cypris::kv_cache_bytes_per_block(cfg, block_size_, tp, st.kv_dtype) *
                        (st.end_layer - st.first_layer) / cfg.num_hidden_layers;
  }
  activation_dtype_ = stages_.front().activation_dtype;
  kv_cache_dtype_ = stages_.front().kv_dtype;
  const Device device = stages_.front().device;
  // The ranks this process holds: rank s * tp + t of every stage, or its one MPI rank (process r is
  // rank (r / tp, r % tp), pipeline_ranks.h).
  const int local = world ? 1 : pp * tp;
  ranks_.resize(static_cast<size_t>(local));
  for (int r = 0; r < local; ++r) {
    const PipelineRank at = pipeline_rank_of(world ? first_rank_ : r, tp, pp);
    ranks_[static_cast<size_t>(r)].stage = at.stage;
    ranks_[static_cast<size_t>(r)].tp_rank = at.tp_rank;
  }
  // GPU ranks take GPUs 0, 1, ... in rank order; CPU ranks share the cores (each gets its part of
  // --threads).
  std::vector<int> gpu_of_rank(ranks_.size(), -1);
  int gpus = 0, cpu_ranks = 0;
  for (int r = 0; r < local; ++r) {
    if (stages_[static_cast<size_t>(r / tp)].device == Device::Cuda) {
      gpu_of_rank[static_cast<size_t>(r)] = gpus++;
    } else {
      ++cpu_ranks;
    }
  }
  const int total = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  const int per_rank = std::max(1, total / std::max(1, cpu_ranks));
  if (world && (tp > 1 || pp > 1)) {
    // Every process makes the same communicators in the same order: its stage's tensor-parallel
    // group, then the world for the hand-offs (and, on GPUs, an MPI one for the logits).
    if (tp > 1) process_comm_ = world->make_communicator(device, world->local_rank(), ranks_.front().stage);
    if (pp > 1) {
      pipe_comm_ = world->make_communicator(device, world->local_rank(), 0);
      if (device != Device::Cpu) logits_comm_ = world->make_communicator(Device::Cpu, world->local_rank(), 0);
    }
    build_rank(options, cfg, 0, options.threads, 0);
  } else if (local == 1) {
    build_rank(options, cfg, 0, options.threads, 0);
  } else {
    if (pp == 1) {
      workers_ = make_tp_workers(device, tp);
    } else {
      std::vector<Device> devices;
      for (const Stage& st : stages_) devices.push_back(st.device);
      workers_ = make_pipeline_workers(devices, tp, gpu_of_rank);
    }
    workers_->run([&](int rank) { build_rank(options, cfg, rank, per_rank, gpu_of_rank[static_cast<size_t>(rank)]); });
  }
  startup.mark("weights");
  micro_batches_ = pp == 1 ? 1 : (options.micro_batches > 0 ? options.micro_batches : pp);
  graph_policy_.max_seq_len_to_capture = std::min<int64_t>(options.max_seq_len_to_capture, cfg.max_model_len);
  graph_policy_.sizes = graph_capture_sizes(options.max_num_seqs);
  graph_policy_.max_query_len = std::max(1, options.graph_max_query_len);
  const bool capturable = model().graph_capturable();
  graph_policy_.enforce_eager =
      options.enforce_eager || device != Device::Cuda || tp > 1 || pp > 1 || !capturable;
  if (!graph_policy_.enforce_eager && lora_enabled()) {
    // The graphs bake in every site's stacked adapter weights and launch its product whatever the
    // slots hold: all of them are allocated now (zero, scale 0), before the memory profile, and
    // adapters are written into them in place. Each row's slot comes from the graphs' input buffer.
    const std::vector<LoraAdapter> probes = lora_site_probes(cfg);
    for_each_rank([&](Rank& r) {
      for (const LoraAdapter& p : probes) {
        try {
          r.lora->reserve(p);
        } catch (const Error&) {
          // Not a projection of this model (or not of that shape): nothing to allocate.
        }
      }
    });
    LOG_INFO("LoRA with CUDA graphs: {:.1f} MiB of adapter weights for {} slots of rank {} on every projection",
             static_cast<double>(lora_device_bytes()) / (1 << 20), max_loras_, max_lora_rank_);
  }
  if (!options.enforce_eager && device == Device::Cuda && !capturable) {
    LOG_INFO("--enforce-eager false: {} routes its experts on the host, which CUDA graphs cannot capture; "
             "running eagerly",
             resolve_architecture(cfg));
  } else if (!options.enforce_eager && tp > 1) {
    LOG_WARN(
        "--enforce-eager false: no CUDA graphs at --tensor-parallel-size {} yet (the vocab-parallel embedding "
        "reads token ids on the host); running eagerly",
        tp);
  } else if (!options.enforce_eager && any_cuda && pp > 1) {
    LOG_WARN("--enforce-eager false: no CUDA graphs with {} pipeline stages yet (the hand-off between stages goes "
             "through the host); running eagerly",
             pp);
  }
  // The cache is sized once the weights are in place (on a GPU, from the memory left).
  kv_block_bytes_ = 0;
  for (const Stage& st : stages_) kv_block_bytes_ += st.kv_block_bytes;
  size_kv_cache(options, cfg);
  // Every process holds the same blocks: the fewest any of them has room for (GPUs may differ).
  if (world) num_blocks_ = world->all_reduce_min(num_blocks_);
  startup.mark("memory profile");
  for_each_rank([&](Rank& r) { allocate_kv_cache(r, cfg); });
  startup.mark("KV cache");
  if (!graph_policy_.enforce_eager) capture_graphs();
  if (!graph_policy_.enforce_eager) startup.mark("CUDA graphs");
  startup.log();
  LOG_INFO("loaded {} ({} layers, weights {}, activations {}, {}, tensor parallel {}) from {}; KV cache {} blocks x "
           "{} tokens, {}",
           resolve_architecture(cfg), cfg.num_hidden_layers, dtype_name(weight_dtype_), dtype_name(activation_dtype_),
           device == Device::Cuda ? "cuda" : "cpu", tp, options.model_dir.string(), num_blocks_, block_size_,
           dtype_name(kv_cache_dtype_));
  if (pp > 1) {
    std::string desc;
    for (size_t s = 0; s < stages_.size(); ++s) {
      const Stage& st = stages_[s];
      desc += fmt::format("{}stage {}: layers [{}, {}) on {}, KV cache {}", s ? "; " : "", s, st.first_layer,
                          st.end_layer, st.device == Device::Cuda ? "cuda" : "cpu", dtype_name(st.kv_dtype));
    }
    LOG_INFO("{} pipeline stages ({}), {} micro-batches per step", pp, desc, micro_batches_);
  }
  if (kv_cache_dtype_ == DType::F8E4M3 || kv_cache_dtype_ == DType::F8E5M2) {
    LOG_INFO("KV cache dtype {} (1 byte per element); K/V scales from {}", dtype_name(kv_cache_dtype_),
             kv_scales_source_);
  } else if (!options.quantization_param_path.empty()) {
    LOG_WARN("--quantization-param-path {} has no effect without an fp8 --kv-cache-dtype",
             options.quantization_param_path);
  }
  if (world && !drives_processes_) serve_mpi_worker(*this);  // never returns
  if (world) world->mark_serving();
}

void ModelRunner::plan_stages(const ModelRunnerOptions& options, const ModelConfig& cfg) {
  const int layers = cfg.num_hidden_layers;
  const Device device = resolve_device(options.device) == "cuda" ? Device::Cuda : Device::Cpu;
  int pp = options.pipeline_stages;
  std::vector<int> counts = options.stage_layers;
  std::vector<std::string> devices = options.stage_devices;
  if (options.gpu_layers) {
    CYPRIS_CHECK(pp == 1 && counts.empty() && devices.empty(),
                 "--gpu-layers {} cannot be combined with --pipeline-parallel-size {} yet", *options.gpu_layers, pp);
    CYPRIS_CHECK(*options.gpu_layers >= -1, "--gpu-layers {} must be -1 (auto) or a number of layers in [0, {}]",
                 *options.gpu_layers, layers);
    int n = *options.gpu_layers == -1 ? auto_gpu_layers(options, cfg) : *options.gpu_layers;
    if (n > layers) {
      LOG_INFO("--gpu-layers {}: the model has {} layers; all of them on the GPU", n, layers);
      n = layers;
    }
    if (n > 0) {
      CYPRIS_CHECK(cuda_device_count() > 0,
                   "--gpu-layers {} puts layers on a GPU, but {}; use --gpu-layers 0 (all on the CPU)", n,
                   cuda_compiled() ? "no GPU is visible" : "this build has no CUDA backend");
    }
    if (n == 0) {
      devices = {"cpu"};
    } else if (n == layers) {
      devices = {"cuda"};
    } else {
      counts = {n, layers - n};
      devices = {"cuda", "cpu"};
    }
    pp = static_cast<int>(devices.size());
    LOG_INFO("--gpu-layers {}: {} of {} layers on the GPU, the rest and the LM head on the CPU",
             *options.gpu_layers, n, layers);
  }
  CYPRIS_CHECK(pp >= 1 && pp <= layers, "--pipeline-parallel-size {} must be in [1, {}] (the model's layers, {})", pp,
               layers, cfg.source);
  CYPRIS_CHECK(counts.empty() || static_cast<int>(counts.size()) == pp,
               "pipeline stages: {} layer counts for {} stages", counts.size(), pp);
  CYPRIS_CHECK(devices.empty() || static_cast<int>(devices.size()) == pp, "pipeline stages: {} devices for {} stages",
               devices.size(), pp);
  stages_.assign(static_cast<size_t>(pp), Stage{});
  int first = 0;
  for (int s = 0; s < pp; ++s) {
    Stage& st = stages_[static_cast<size_t>(s)];
    st.first_layer = first;
    st.end_layer = counts.empty() ? (s + 1) * layers / pp : first + counts[static_cast<size_t>(s)];
    CYPRIS_CHECK(st.end_layer > st.first_layer && st.end_layer <= layers,
                 "pipeline stage {}: layers [{}, {}) are not a non-empty part of the model's {} layers", s,
                 st.first_layer, st.end_layer, layers);
    first = st.end_layer;
    st.device = devices.empty() ? device
                                : (resolve_device(devices[static_cast<size_t>(s)]) == "cuda" ? Device::Cuda : Device::Cpu);
  }
  CYPRIS_CHECK(first == layers, "pipeline stages hold {} of the model's {} layers", first, layers);
}

int ModelRunner::auto_gpu_layers(const ModelRunnerOptions& options, const ModelConfig& cfg) {
  if (cuda_device_count() == 0) {
    LOG_INFO("--gpu-layers auto: {}; all layers on the CPU",
             cuda_compiled() ? "no GPU is visible" : "this build has no CUDA backend");
    return 0;
  }
  // What one decoder layer takes on the GPU: its linear weights (in the checkpoint's quantized type
  // when it has one, else the weight dtype) and the K/V of max_model_len tokens.
  BackendOptions bo;
  bo.device = "cuda";
  bo.threads = 1;
  auto probe = make_backend(bo);
  const DeviceMemoryInfo mem = probe->memory_info();
  const double hidden = cfg.hidden_size, hd = cfg.head_dim;
  const double attn = hidden * hd * (2.0 * cfg.num_attention_heads + 2.0 * cfg.num_key_value_heads);
  double mlp = 3.0 * hidden * cfg.intermediate_size;
  if (cfg.num_experts > 0) {
    mlp = 3.0 * hidden * (cfg.num_experts * static_cast<double>(cfg.moe_intermediate_size) +
                          static_cast<double>(cfg.shared_expert_intermediate_size));
  }
  double bytes_per_weight = static_cast<double>(dtype_size(weight_dtype_));
  auto weights = open_weight_source(model_families(), options.model_dir, cfg, options.load);
  for (const char* name : {"model.layers.0.mlp.down_proj.weight", "layers.0.mlp.down_proj.weight"}) {
    if (auto native = weights->native_dtype(name)) {
      const DTypeBlock blk = dtype_block(*native);
      bytes_per_weight = static_cast<double>(blk.bytes) / blk.elems;
      break;
    }
  }
  const DType kv = options.kv_cache_dtype.value_or(weight_dtype_);
  const double kv_per_layer =
      2.0 * static_cast<double>(cfg.max_model_len) * cfg.num_key_value_heads * hd * static_cast<double>(dtype_size(kv));
  const double per_layer = (attn + mlp) * bytes_per_weight + kv_per_layer;
  constexpr double kReserve = 1.0 * (1 << 30);  // activations, cuBLAS workspace, the CUDA context
  const double budget = options.gpu_memory_utilization * static_cast<double>(mem.total_bytes) -
                        static_cast<double>(mem.total_bytes - mem.free_bytes) - kReserve;
  const int n = budget > 0 ? static_cast<int>(std::min<double>(cfg.num_hidden_layers, std::floor(budget / per_layer)))
                           : 0;
  LOG_INFO("--gpu-layers auto: {:.2f} GiB free of {:.2f} GiB, about {:.1f} MiB per layer with its KV cache: {} layers",
           static_cast<double>(mem.free_bytes) / (1 << 30), static_cast<double>(mem.total_bytes) / (1 << 30),
           per_layer / (1 << 20), n);
  return n;
}

void ModelRunner::size_kv_cache(const ModelRunnerOptions& options, const ModelConfig& cfg) {
  // One pool of block ids for every stage: each stage's cache has num_blocks_ blocks of its own
  // layers, so the tightest stage decides.
  // Under MPI each process holds (and sizes from its own memory) its stage's cache only.
  int64_t cpu_bytes = 0;
  for (int s = 0; s < pipeline_parallel_size(); ++s) {
    const Stage& st = stages_[static_cast<size_t>(s)];
    if (holds_stage(s) && st.device == Device::Cpu) cpu_bytes += st.kv_block_bytes;
  }
  if (options.num_blocks > 0) {
    num_blocks_ = options.num_blocks;
  } else {
    num_blocks_ = 0;
    bool sized = false;
    for (int s = 0; s < pipeline_parallel_size(); ++s) {
      if (!holds_stage(s) || stages_[static_cast<size_t>(s)].device != Device::Cuda ||
          options.gpu_memory_utilization <= 0) {
        continue;
      }
      const int64_t b = blocks_from_device_memory(cfg, options, s);
      num_blocks_ = sized ? std::min(num_blocks_, b) : b;
      sized = true;
    }
    if (cpu_bytes > 0 && options.cpu_kv_cache_bytes > 0) {
      const int64_t b = static_cast<int64_t>(options.cpu_kv_cache_bytes / static_cast<double>(cpu_bytes));
      CYPRIS_CHECK(b >= 1, "--cpu-kvcache-space {} GiB holds no KV block of {:.1f} KiB for this model",
                   options.cpu_kv_cache_bytes / (1024.0 * 1024.0 * 1024.0), static_cast<double>(cpu_bytes) / 1024.0);
      num_blocks_ = sized ? std::min(num_blocks_, b) : b;
      sized = true;
    }
    if (!sized) num_blocks_ = (cfg.max_model_len + block_size_ - 1) / block_size_;
  }
  if (cpu_bytes > 0) {
    // The cache's pages are taken only as they are used, so a size memory cannot back would start
    // and fail much later (or die in the OOM killer): refuse it now (issue #20).
    const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    const double want = static_cast<double>(num_blocks_) * static_cast<double>(cpu_bytes);  // all CPU ranks
    constexpr double kGiB = 1 << 30;
    CYPRIS_CHECK(phys <= 0 || want <= 0.9 * phys,
                 "{}: the KV cache would take {:.1f} GiB ({} blocks of {:.1f} KiB), more than 90% of this machine's "
                 "{:.1f} GiB of memory; lower it",
                 options.num_blocks > 0 ? fmt::format("--num-gpu-blocks-override {}", options.num_blocks)
                                        : fmt::format("--cpu-kvcache-space {}", options.cpu_kv_cache_bytes / kGiB),
                 want / kGiB, num_blocks_, static_cast<double>(cpu_bytes) / 1024.0, phys / kGiB);
  }
}

ModelRunner::~ModelRunner() {
  if (drives_processes_) {
    try {
      MpiWorld::instance().send_stop();  // the other processes leave their step loop and exit
    } catch (const std::exception& e) {
      LOG_ERROR("stopping the other MPI processes: {}", e.what());
    }
  }
  if (!workers_) return;
  // Each rank frees its shard on its own thread (a GPU rank's memory belongs to its device).
  try {
    workers_->run([&](int rank) {
      ranks_[static_cast<size_t>(rank)] = Rank{};
    });
  } catch (const std::exception& e) {
    LOG_ERROR("freeing the tensor parallel ranks: {}", e.what());
  }
}

void ModelRunner::build_rank(const ModelRunnerOptions& options, const ModelConfig& cfg, int rank, int threads,
                             int gpu) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  const Stage& st = stages_[static_cast<size_t>(r.stage)];
  BackendOptions bo;
  bo.device = st.device == Device::Cuda ? "cuda" : "cpu";
  bo.threads = threads;
  // Under MPI a process uses the GPU its local rank names (a stage of one rank has no process_comm_).
  bo.cuda_device = process_comm_ || pipe_comm_ ? MpiWorld::instance().local_rank() : std::max(0, gpu);
  bo.cuda_fp32_gemm = options.cuda_fp32_gemm;
  bo.cuda_activation_dtype = st.activation_dtype;
  // Each rank opens the checkpoint itself and reads only its slices.
  auto weights = open_weight_source(model_families(), options.model_dir, cfg, options.load);
  if (st.device == Device::Cuda && options.cpu_offload_gb != 0) {
    bo.weight_offload = plan_weight_offload(
        options.cpu_offload_gb,
        estimate_layer_weight_bytes(cfg, *weights, weight_dtype_, tp_, st.first_layer, st.end_layer), st.first_layer);
  }
  r.backend = make_backend(bo);
  // fp8 cache scales first: a bad --quantization-param-path fails before the weights are read.
  ResolvedKvScales scales =
      resolve_kv_cache_scales(st.kv_dtype, options.load.load_format == "dummy" ? nullptr : weights.get(),
                              options.quantization_param_path, cfg.num_hidden_layers, r.tp_rank);
  r.kv_scales.assign(scales.layers.begin() + st.first_layer, scales.layers.begin() + st.end_layer);
  if (rank == 0) kv_scales_source_ = std::move(scales.source);
  ModelBuildOptions build;
  build.weight_dtype = weight_dtype_;
  build.parallel = {r.tp_rank, tp_};  // under MPI, this process's rank
  build.comm = workers_ && tp_ > 1 ? &workers_->comm(rank) : process_comm_.get();
  // GPU communicators enqueue on the rank's compute stream, after the kernels that feed them.
  if (build.comm) build.comm->set_stream(r.backend->stream());
  if (Communicator* pipe = workers_ ? workers_->pipe_comm(rank) : pipe_comm_.get()) {
    pipe->set_stream(r.backend->stream());
  }
  build.first_layer = st.first_layer;
  build.last_layer = st.end_layer;
  if (max_loras_ > 0) {
    r.lora = std::make_unique<LoraSites>(*r.backend, max_loras_, max_lora_rank_);
    build.lora = r.lora.get();
  }
  r.model = build_model(cfg, *weights, *r.backend, build);
  if (!bo.weight_offload.empty() && r.tp_rank == 0) log_weight_offload(options.cpu_offload_gb, bo.weight_offload, r);
}

void ModelRunner::log_weight_offload(double gib, const WeightOffloadPlan& plan, Rank& r) {
  const Stage& st = stages_[static_cast<size_t>(r.stage)];
  LOG_INFO("{}", describe_weight_offload(gib, plan, st.end_layer - st.first_layer));
  const LayerWeightHooks* hooks = layer_weight_hooks(*r.backend);
  if (!hooks) return;
  const WeightOffloadStats s = hooks->weight_offload_stats();
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  LOG_INFO("--cpu-offload-gb: loaded {:.2f} GiB of layers {}..{} into pinned host memory{}", s.host_bytes / kGiB,
           plan.first_layer, plan.end_layer - 1,
           s.resident_bytes > 0 ? fmt::format("; {:.1f} MiB of them did not fit the staging estimate and stay on the GPU",
                                              static_cast<double>(s.resident_bytes) / (1024.0 * 1024.0))
                                : "");
}

void ModelRunner::allocate_kv_cache(Rank& r, const ModelConfig& /*cfg*/) {
  const std::vector<int64_t> shape = {num_blocks_, block_size_, r.model->num_kv_heads(), r.model->head_dim()};
  const DType dtype = stages_[static_cast<size_t>(r.stage)].kv_dtype;
  r.kv_cache.resize(static_cast<size_t>(r.model->num_layers()));  // this stage's layers
  for (size_t l = 0; l < r.kv_cache.size(); ++l) {
    KvCacheLayer& layer = r.kv_cache[l];
    // Uninitialised: attention reads only slots written earlier, and untouched pages cost no RAM.
    layer.k = r.backend->empty(dtype, shape);
    layer.v = r.backend->empty(dtype, shape);
    layer.scales = r.kv_scales.at(l);
  }
}

void ModelRunner::for_each_rank(const std::function<void(Rank&)>& fn) {
  if (!workers_) {
    fn(ranks_.front());
    return;
  }
  workers_->run([&](int rank) { fn(ranks_[static_cast<size_t>(rank)]); });
}

void ModelRunner::set_debug_hook(DebugHook hook) {
  debug_hook_ = static_cast<bool>(hook);
  for (Rank& r : ranks_) {
    if (r.tp_rank != 0) continue;  // each stage's rank 0
    if (!hook || r.backend->device() == Device::Cpu) {
      r.model->set_debug_hook(hook);
      continue;
    }
    Backend* be = r.backend.get();
    r.model->set_debug_hook([be, hook](const std::string& name, const Tensor& t) {
      if (t.ndim() != 2) return hook(name, t);
      const int64_t rows = t.shape[0], cols = t.shape[1], ld = row_stride(t);
      Buffer host(static_cast<size_t>(rows * cols) * dtype_size(t.dtype));
      for (int64_t row = 0; row < rows; ++row) {  // row by row: the intermediate may be a column slice
        Tensor view(static_cast<char*>(t.data) + row * ld * dtype_size(t.dtype), t.dtype, {cols}, t.device);
        be->download(view, static_cast<char*>(host.data()) + row * cols * dtype_size(t.dtype));
      }
      hook(name, Tensor(host.data(), t.dtype, {rows, cols}, Device::Cpu));
    });
  }
}

std::vector<StageStats> ModelRunner::stage_stats() const {
  std::vector<StageStats> out;
  for (const Stage& st : stages_) {
    out.push_back({st.first_layer, st.end_layer, st.device == Device::Cuda ? "cuda" : "cpu", st.busy_seconds});
  }
  return out;
}

int64_t ModelRunner::blocks_from_device_memory(const ModelConfig& cfg, const ModelRunnerOptions& options,
                                               int stage) {
  // vLLM's profile run: what the weights left in use, then the peak of the largest step the
  // scheduler can build and, with graphs, of the largest graph's decode batch. The stage's rank 0
  // device stands for the stage's (its ranks hold equal shards).
  Backend& be = *(pipe_comm_ ? ranks_.front() : ranks_[static_cast<size_t>(stage) * tp_]).backend;
  be.synchronize();
  const DeviceMemoryInfo mem = be.memory_info();
  GpuMemoryBudget m;
  m.utilization = options.gpu_memory_utilization;
  m.total_bytes = mem.total_bytes;
  m.used_bytes = mem.total_bytes - mem.free_bytes;
  m.bytes_per_block = stages_[static_cast<size_t>(stage)].kv_block_bytes / tp_;
  if (m.utilization > 0 && m.utilization <= 1.0) {
    const int64_t tokens = std::max<int64_t>(1, options.max_num_batched_tokens);
    m.activation_peak = profile_peak(
        cfg, make_profile_prefill_batch(tokens, options.max_num_seqs, cfg.max_model_len, block_size_), stage);
    if (!graph_policy_.enforce_eager) {
      // The graphs' private pool holds about the largest graph's activations; its best-fit reuse
      // (blocks up to twice a request) can need up to that again for the smaller sizes.
      constexpr size_t kPerGraph = size_t{1} << 20;  // instantiated graph, rough
      const size_t decode = profile_peak(
          cfg,
          make_profile_decode_batch(std::max(graph_policy_.sizes.back(), max_graph_tokens(graph_policy_)),
                                    static_cast<int32_t>(graph_policy_.max_seq_len_to_capture), block_size_),
          stage);
      m.graph_reserve = 2 * decode + kPerGraph * graph_policy_.sizes.size();
    }
  }
  // The GPU sampler allocates its scratch on first use, after the cache: keep room for a full batch.
  if (stage + 1 == pipeline_parallel_size() && can_sample_on_device()) {
    m.sampler_scratch = static_cast<size_t>(std::max<int64_t>(1, options.max_num_seqs)) *
                        static_cast<size_t>(cfg.vocab_size) * (sizeof(float) + sizeof(int32_t));
  }
  const int64_t blocks = kv_cache_blocks(m);
  constexpr double kGiB = 1 << 30;
  LOG_INFO(
      "GPU memory{}: {:.2f} GiB total, {:.2f} GiB in use after the weights, activation peak {:.2f} GiB (profiled), "
      "{:.2f} GiB kept for CUDA graphs, {:.2f} GiB for GPU sampling; KV cache gets {} blocks ({:.2f} GiB)",
      pipeline_parallel_size() > 1 ? fmt::format(" (stage {})", stage) : std::string(),
      static_cast<double>(m.total_bytes) / kGiB, static_cast<double>(m.used_bytes) / kGiB,
      static_cast<double>(m.activation_peak) / kGiB, static_cast<double>(m.graph_reserve) / kGiB,
      static_cast<double>(m.sampler_scratch) / kGiB, blocks,
      static_cast<double>(blocks) * static_cast<double>(m.bytes_per_block) / kGiB);
  return blocks;
}

size_t ModelRunner::profile_peak(const ModelConfig& /*cfg*/, const BatchContext& b, int stage) {
  b.validate(1, block_size_);
  for_each_rank([&](Rank& r) {
    // The profile batches write no K/V and read every context through block 0.
    r.kv_cache.resize(static_cast<size_t>(r.model->num_layers()));
    const DType dtype = stages_[static_cast<size_t>(r.stage)].kv_dtype;
    const std::vector<int64_t> shape = {1, block_size_, r.model->num_kv_heads(), r.model->head_dim()};
    for (auto& layer : r.kv_cache) {
      layer.k = r.backend->zeros(dtype, shape);
      layer.v = r.backend->zeros(dtype, shape);
    }
    r.backend->synchronize();
    r.backend->reset_peak_memory();
  });
  if (pipeline_parallel_size() == 1) {
    run_batch(b, nullptr, 1);
  } else {
    // Only the profiled stage runs, on a zero hand-off: the peak does not depend on the values, and
    // a CPU stage beside a GPU one (--gpu-layers) would spend long on a step of this size.
    const int pp = pipeline_parallel_size();
    for_each_rank([&](Rank& r) {
      if (r.stage != stage) return;
      StageHandoff in, sink;
      if (stage > 0) {
        const DType act = stages_[static_cast<size_t>(stage)].activation_dtype;
        const std::vector<int64_t> shape = {b.num_tokens(), config().hidden_size};
        in.hidden = r.backend->zeros(act, shape);
        in.residual = r.backend->zeros(act, shape);
      }
      forward_rank(r, b, stage > 0 ? &in : nullptr, stage + 1 < pp ? &sink : nullptr, nullptr);
    });
  }
  size_t peak = 0;
  for_each_rank([&](Rank& r) {
    r.backend->synchronize();
    if (r.stage == stage && r.tp_rank == 0) peak = r.backend->peak_memory_bytes();
  });
  for_each_rank([&](Rank& r) {
    r.kv_cache.clear();
    // The budget counts the peak, not what the exact-size pool happens to cache after two
    // differently shaped runs: hand the cache back (vLLM's empty_cache after profiling).
    r.backend->release_cached_memory();
  });
  return peak;
}

void ModelRunner::capture_graphs() {
  Rank& r = ranks_.front();
  double seconds = 0;
  try {
    r.graphs = make_decode_graph_runner(*r.backend, graph_policy_, block_size_);
    if (!r.graphs) {
      graph_policy_.enforce_eager = true;
      return;
    }
    seconds = r.graphs->capture(*r.model, r.kv_cache);
  } catch (const std::exception& e) {
    // Eager decode is always correct: a failed capture costs speed, not the server.
    LOG_WARN("CUDA graph capture failed ({}); running eagerly", e.what());
    r.graphs.reset();
    graph_policy_.enforce_eager = true;
    return;
  }
  LOG_INFO(
      "captured {} CUDA graphs for decode batches of 1..{} sequences with contexts up to {} tokens in {:.2f} s "
      "({:.1f} MiB of graph memory)",
      r.graphs->num_graphs(), graph_policy_.sizes.back(), graph_policy_.max_seq_len_to_capture, seconds,
      static_cast<double>(r.graphs->pool_bytes()) / (1 << 20));
}

Logits ModelRunner::execute(const BatchContext& b) {
  const StepLogits logits = execute_step(b);
  return download(logits, 0, logits.rows());
}

void ModelRunner::check_lora(const LoraAdapter& adapter) const {
  CYPRIS_CHECK(lora_enabled(), "LoRA adapters need --enable-lora");
  ranks_.front().lora->check(adapter);
}

void ModelRunner::load_lora(int slot, const LoraAdapter& adapter) {
  check_lora(adapter);
  const size_t before = lora_device_bytes();
  for_each_rank([&](Rank& r) { r.lora->load(slot, adapter); });
  if (!graph_policy_.enforce_eager && lora_device_bytes() != before) {
    // The adapter adapts a projection no probe allocated before the capture: the graphs would skip
    // its product, so steps run eagerly from now on.
    LOG_WARN("LoRA adapter {} adapts a projection the CUDA graphs were captured without; running eagerly from now on",
             adapter.path);
    graph_policy_.enforce_eager = true;
    for_each_rank([](Rank& r) { r.graphs.reset(); });
  }
}

void ModelRunner::reserve_lora(const LoraAdapter& adapter) {
  check_lora(adapter);
  const size_t before = lora_device_bytes();
  for_each_rank([&](Rank& r) { r.lora->reserve(adapter); });
  if (!graph_policy_.enforce_eager && lora_device_bytes() != before) {
    // The adapter adapts a projection no probe allocated before the capture: the graphs would skip
    // its product, so steps run eagerly from now on.
    LOG_WARN("LoRA adapter {} adapts a projection the CUDA graphs were captured without; running eagerly from now on",
             adapter.path);
    graph_policy_.enforce_eager = true;
    for_each_rank([](Rank& r) { r.graphs.reset(); });
  }
}

void ModelRunner::clear_lora(int slot) {
  CYPRIS_CHECK(lora_enabled(), "LoRA adapters need --enable-lora");
  for_each_rank([&](Rank& r) { r.lora->clear(slot); });
}

size_t ModelRunner::lora_device_bytes() const { return lora_enabled() ? ranks_.front().lora->device_bytes() : 0; }

StepLogits ModelRunner::execute_step(const BatchContext& b) {
  b.validate(num_blocks_, block_size_);
  if (!b.lora_slots.empty()) {
    // The kernels read the slots on the device: check them here.
    CYPRIS_CHECK(lora_enabled(), "the batch names LoRA slots but LoRA is not enabled (--enable-lora)");
    CYPRIS_CHECK(static_cast<int64_t>(b.lora_slots.size()) == b.num_tokens(), "batch: {} LoRA slots for {} tokens",
                 b.lora_slots.size(), b.num_tokens());
    for (int32_t s : b.lora_slots) {
      CYPRIS_CHECK(s < max_loras_, "batch: LoRA slot {} is not below --max-loras {}", s, max_loras_);
    }
  }
  bool any_device = false;
  for (const Stage& st : stages_) any_device = any_device || st.device != Device::Cpu;
  if (any_device || drives_processes_) {
    // Device kernels cannot throw: check on the host what the CPU kernels check as they go (and
    // before the other processes get the batch: a rank that fails alone would leave them behind).
    const int64_t vocab = config().vocab_size;
    const int64_t max_pos = config().max_model_len;
    for (int64_t t = 0; t < b.num_tokens(); ++t) {
      CYPRIS_CHECK(b.token_ids[t] >= 0 && b.token_ids[t] < vocab, "token id {} at position {} is out of range [0, {})",
                   b.token_ids[t], t, vocab);
      CYPRIS_CHECK(b.positions[t] >= 0 && b.positions[t] < max_pos,
                   "position {} of token {} is outside the rotary table [0, {}) (--max-model-len)", b.positions[t], t,
                   max_pos);
    }
  }
  if (drives_processes_) send_to_mpi_workers(StepMessage::kExecute, encode_batch(b));
  StepLogits out;
  if (!debug_hook_ && is_graph_eligible(b, graph_policy_)) {
    out.view = ranks_.front().graphs->replay(b);  // the graph's buffer: valid until the next replay
    return out;
  }
  if (drives_processes_) {
    try {
      run_batch(b, &out, micro_batches_);  // the others cut the batch the same way
    } catch (const Error& e) {
      // The other processes ran (or wait in) this step's collectives: they cannot be brought back in
      // step with this one, so the job ends (in-flight requests get this error).
      MpiWorld& world = MpiWorld::instance();
      if (!world.failed()) world.fail(fmt::format("process 0 failed a step the others ran: {}", e.what()));
      throw;
    }
  } else {
    // A debug hook reads the stages' intermediates one stage after the other.
    run_batch(b, &out, debug_hook_ ? 1 : micro_batches_);
  }
  return out;
}

void ModelRunner::run_batch(const BatchContext& b, StepLogits* out, int micro_batches) {
  if (pipeline_parallel_size() > 1 && pipe_comm_) return run_pipeline_processes(b, out, micro_batches);
  if (pipeline_parallel_size() > 1) return run_pipeline(b, out, micro_batches);
  if (!workers_) return forward_rank(ranks_.front(), b, nullptr, nullptr, out);
  workers_->run([&](int rank) {
    forward_rank(ranks_[static_cast<size_t>(rank)], b, nullptr, nullptr, rank == 0 ? out : nullptr);
  });
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A stage's output in host memory as F32 (what every CPU stage computes in): a GPU stage's output
// goes through here to the next stage.
DeviceTensor host_f32(Backend& be, const DeviceTensor& x) {
  if (x.view.device == Device::Cpu && x.view.dtype == DType::F32) return x;
  const int64_t n = x.view.numel();
  std::vector<uint16_t> raw;
  auto storage = std::shared_ptr<float[]>(new float[static_cast<size_t>(std::max<int64_t>(n, 1))]);
  if (x.view.dtype == DType::F32) {
    be.download(x.view, storage.get());
  } else {
    CYPRIS_CHECK(x.view.dtype == DType::BF16 || x.view.dtype == DType::F16,
                 "pipeline hand-off: {} activations are not supported", dtype_name(x.view.dtype));
    raw.resize(static_cast<size_t>(n));
    be.download(x.view, raw.data());
    for (int64_t i = 0; i < n; ++i) {
      storage[static_cast<size_t>(i)] = x.view.dtype == DType::BF16 ? bf16_to_f32(raw[static_cast<size_t>(i)])
                                                                    : f16_to_f32(raw[static_cast<size_t>(i)]);
    }
  }
  DeviceTensor out;
  out.view = Tensor(storage.get(), DType::F32, x.view.shape, Device::Cpu);
  out.storage = std::shared_ptr<void>(storage, storage.get());
  return out;
}

// A host F32 hand-off onto a stage's backend in its activation dtype.
DeviceTensor to_stage(Backend& be, const DeviceTensor& x) {
  const DType act = be.activation_dtype();
  if (be.device() == Device::Cpu && act == DType::F32) return x;  // host memory, read in place
  const int64_t n = x.view.numel();
  const float* src = static_cast<const float*>(x.view.data);
  if (act == DType::F32) return be.upload(src, DType::F32, x.view.shape);
  std::vector<uint16_t> raw(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) raw[static_cast<size_t>(i)] = act == DType::BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
  return be.upload(raw.data(), act, x.view.shape);
}

}  // namespace

void ModelRunner::run_pipeline(const BatchContext& b, StepLogits* out, int micro_batches) {
  const int pp = pipeline_parallel_size();
  const std::vector<MicroBatch> parts = split_micro_batches(b, micro_batches);
  const int m = static_cast<int>(parts.size());
  // handoff[(s * m + k) * tp + t]: what stage s's tp rank t hands stage s + 1 for micro-batch k,
  // in host memory (F32) when either side is not a CPU stage.
  std::vector<StageHandoff> handoff(static_cast<size_t>((pp - 1) * m * tp_));
  std::vector<StepLogits> logits(static_cast<size_t>(m));
  std::vector<double> busy(static_cast<size_t>(pp), 0.0);
  const Clock::time_point start = Clock::now();
  workers_->run([&](int rank) {
    Rank& r = ranks_[static_cast<size_t>(rank)];
    const int s = r.stage, t = r.tp_rank;
    Backend& be = *r.backend;
    const bool last = s + 1 == pp;
    // Every stage on a GPU: the hand-off goes GPU to GPU by NCCL send / recv on the ranks' streams
    // (no host copy). Stage s receives micro-batch k + 1 in the tick stage s - 1 computes and sends it,
    // after its own forward and send of k: within a tick every send meets its receive, so the stream
    // waits below never wait on the next tick.
    Communicator* pipe = workers_->pipe_comm(rank);
    const DType act = stages_[static_cast<size_t>(s)].activation_dtype;
    const int64_t hidden = config().hidden_size;
    std::vector<StageHandoff> received(pipe && s > 0 ? static_cast<size_t>(m) : 0);
    auto receive = [&](int j) {
      const int64_t n = parts[static_cast<size_t>(j)].batch.num_tokens();
      StageHandoff& h = received[static_cast<size_t>(j)];
      h.residual = be.empty(act, {n, hidden});  // [T, hidden]
      h.hidden = be.empty(act, {n, hidden});
      pipe->start_recv(h.residual.view.data, act, n * hidden, rank - tp_);
      pipe->start_recv(h.hidden.view.data, act, n * hidden, rank - tp_);
    };
    // Tick i: stage s runs micro-batch i - s, so stage s + 1 works on k while stage s runs k + 1.
    for (int tick = 0; tick < m + pp - 1; ++tick) {
      const int k = tick - s;
      const Clock::time_point t0 = Clock::now();
      if (k >= 0 && k < m) {
        StageHandoff in;
        if (s > 0 && pipe) {
          in = std::move(received[static_cast<size_t>(k)]);
        } else if (s > 0) {
          const StageHandoff& prev = handoff[static_cast<size_t>(((s - 1) * m + k) * tp_ + t)];
          in.hidden = to_stage(be, prev.hidden);
          in.residual = to_stage(be, prev.residual);
        }
        StageHandoff* next = last ? nullptr : &handoff[static_cast<size_t>((s * m + k) * tp_ + t)];
        forward_rank(r, parts[static_cast<size_t>(k)].batch, s > 0 ? &in : nullptr, next,
                     last && t == 0 ? &logits[static_cast<size_t>(k)] : nullptr);
        if (next && pipe) {
          const int64_t n = next->residual.view.numel();
          pipe->start_send(next->residual.view.data, act, n, rank + tp_);
          pipe->start_send(next->hidden.view.data, act, n, rank + tp_);
        } else if (next && be.device() != Device::Cpu) {
          next->hidden = host_f32(be, next->hidden);
          next->residual = host_f32(be, next->residual);
        }
      }
      if (pipe && s > 0 && k + 1 >= 0 && k + 1 < m) receive(k + 1);
      if (be.device() != Device::Cpu) be.synchronize();  // its work is done when the busy time ends
      if (t == 0 && k >= 0 && k < m) busy[static_cast<size_t>(s)] += seconds_since(t0);
      workers_->barrier_all();
    }
    if (!last || t != 0 || !out) return;
    // The logits rows back in the step's order: micro-batch k computed parts[k].rows.
    if (m == 1) {
      *out = std::move(logits.front());
      return;
    }
    const int64_t rows = static_cast<int64_t>(b.logits_indices.size());
    const int64_t vocab = config().vocab_size;
    DeviceTensor cat = be.empty(DType::F32, {rows, vocab});  // [rows, vocab] in micro-batch order
    std::vector<int32_t> where(static_cast<size_t>(rows));  // step row -> row of cat
    int64_t off = 0;
    for (int k = 0; k < m; ++k) {
      const MicroBatch& part = parts[static_cast<size_t>(k)];
      const int64_t n = static_cast<int64_t>(part.rows.size());
      if (n == 0) continue;
      std::vector<int32_t> iota(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        iota[static_cast<size_t>(j)] = static_cast<int32_t>(j);
        where[static_cast<size_t>(part.rows[static_cast<size_t>(j)])] = static_cast<int32_t>(off + j);
      }
      DeviceTensor idx = be.upload(iota.data(), DType::I32, {n});
      Tensor dst(static_cast<float*>(cat.view.data) + off * vocab, DType::F32, {n, vocab}, cat.view.device);
      dst.device_index = cat.view.device_index;
      be.gather_rows(logits[static_cast<size_t>(k)].view, idx.view, dst);
      off += n;
    }
    bool ordered = true;
    for (int64_t j = 0; j < rows; ++j) ordered = ordered && where[static_cast<size_t>(j)] == j;
    if (ordered) {
      out->view = cat.view;
      out->storage = std::move(cat.storage);
      return;
    }
    DeviceTensor idx = be.upload(where.data(), DType::I32, {rows});
    DeviceTensor fin = be.empty(DType::F32, {rows, vocab});
    be.gather_rows(cat.view, idx.view, fin.view);
    out->view = fin.view;
    out->storage = std::move(fin.storage);
  });
  pipeline_seconds_ += seconds_since(start);
  for (int s = 0; s < pp; ++s) stages_[static_cast<size_t>(s)].busy_seconds += busy[static_cast<size_t>(s)];
}

bool ModelRunner::holds_stage(int s) const {
  for (const Rank& r : ranks_) {
    if (r.stage == s) return true;
  }
  return false;
}

void ModelRunner::run_pipeline_processes(const BatchContext& b, StepLogits* out, int micro_batches) {
  const int pp = pipeline_parallel_size();
  Rank& r = ranks_.front();
  Backend& be = *r.backend;
  const int s = r.stage;
  const bool last = s + 1 == pp;
  const bool logits_sender = last && r.tp_rank == 0;
  const int64_t hidden = config().hidden_size;
  const int64_t vocab = config().vocab_size;
  const DType act = stages_[static_cast<size_t>(s)].activation_dtype;
  // Every process cuts the batch the same way (the same batch, the same count).
  const std::vector<MicroBatch> parts = split_micro_batches(b, micro_batches);
  const int m = static_cast<int>(parts.size());
  std::vector<MicroBatchShape> shapes;
  for (const MicroBatch& p : parts) shapes.push_back({p.batch.num_tokens(), static_cast<int64_t>(p.rows.size())});
  const StageTransfers plan = plan_stage_transfers(shapes, first_rank_, tp_, pp, hidden, vocab);
  Communicator& pipe = *pipe_comm_;                                // hand-offs (NCCL on GPUs)
  Communicator& host = logits_comm_ ? *logits_comm_ : *pipe_comm_;  // logits, host memory (MPI)
  const Clock::time_point start = Clock::now();

  // Receives. On the host every one is posted up front, so MPI moves a hand-off in while this process
  // still computes; on a GPU a hand-off's receive is enqueued just before its micro-batch (the stream
  // would otherwise hold the first forward until every receive arrived). Logits always come to the
  // host, posted up front.
  std::vector<StageHandoff> inbox(static_cast<size_t>(m));
  std::vector<std::vector<float>> logits_in(static_cast<size_t>(m));
  std::vector<int64_t> recv_ticket(plan.recvs.size(), -1);
  const bool post_early = be.device() == Device::Cpu;
  auto post = [&](size_t i) {
    const StageTransfer& x = plan.recvs[i];
    const size_t k = static_cast<size_t>(x.micro_batch);
    if (x.kind == StageTransferKind::Logits) {
      logits_in[k].resize(static_cast<size_t>(x.count));
      recv_ticket[i] = host.start_recv(logits_in[k].data(), DType::F32, x.count, x.peer);
      return;
    }
    DeviceTensor& t = x.kind == StageTransferKind::Residual ? inbox[k].residual : inbox[k].hidden;
    t = be.empty(act, {shapes[k].tokens, hidden});  // [T, hidden]
    recv_ticket[i] = pipe.start_recv(t.view.data, act, x.count, x.peer);
  };
  for (size_t i = 0; i < plan.recvs.size(); ++i) {
    if (post_early || plan.recvs[i].kind == StageTransferKind::Logits) post(i);
  }

  std::vector<StageHandoff> outbox(static_cast<size_t>(m));        // kept until their sends finish
  std::vector<std::vector<float>> logits_out(static_cast<size_t>(m));
  std::vector<int64_t> pipe_sends, host_sends;  // tickets
  double busy = 0;
  size_t next_send = 0;
  for (int k = 0; k < m; ++k) {
    const size_t ku = static_cast<size_t>(k);
    for (size_t i = 0; i < plan.recvs.size(); ++i) {
      const StageTransfer& x = plan.recvs[i];
      if (x.micro_batch != k || x.kind == StageTransferKind::Logits) continue;
      if (!post_early) post(i);
      pipe.finish(recv_ticket[i]);
    }
    const Clock::time_point t0 = Clock::now();
    StepLogits part_logits;
    forward_rank(r, parts[ku].batch, s > 0 ? &inbox[ku] : nullptr, last ? nullptr : &outbox[ku],
                 logits_sender ? &part_logits : nullptr);
    inbox[ku] = StageHandoff{};
    if (logits_sender) {
      const int64_t rows = shapes[ku].rows;
      std::vector<float>& msg = logits_out[ku];
      msg.assign(static_cast<size_t>(rows * vocab + 1), 0.0f);
      if (rows > 0) be.download(part_logits.view, msg.data());
    }
    if (be.device() != Device::Cpu) be.synchronize();  // its work is done when the busy time ends
    const double step_busy = seconds_since(t0);
    busy += step_busy;
    for (; next_send < plan.sends.size() && plan.sends[next_send].micro_batch == k; ++next_send) {
      const StageTransfer& x = plan.sends[next_send];
      if (x.kind == StageTransferKind::Logits) {
        logits_out[ku].back() = static_cast<float>(step_busy);
        host_sends.push_back(host.start_send(logits_out[ku].data(), DType::F32, x.count, x.peer));
      } else {
        const DeviceTensor& t = x.kind == StageTransferKind::Residual ? outbox[ku].residual : outbox[ku].hidden;
        CYPRIS_CHECK(t.view.numel() == x.count && t.view.dtype == act,
                     "pipeline stage {}: a hand-off of {} {} elements where {} {} were planned", s, t.view.numel(),
                     dtype_name(t.view.dtype), x.count, dtype_name(act));
        pipe_sends.push_back(pipe.start_send(t.view.data, act, x.count, x.peer));
      }
    }
  }
  for (int64_t ticket : pipe_sends) pipe.finish(ticket);
  for (int64_t ticket : host_sends) host.finish(ticket);
  stages_[static_cast<size_t>(s)].busy_seconds += busy;
  if (first_rank_ != 0) return;

  // Process 0: the logits rows back in the step's order, in host memory; the last float of each
  // message is the last stage's busy time for that micro-batch.
  for (size_t i = 0; i < plan.recvs.size(); ++i) host.finish(recv_ticket[i]);
  const int64_t rows = static_cast<int64_t>(b.logits_indices.size());
  auto storage = std::shared_ptr<float[]>(new float[static_cast<size_t>(std::max<int64_t>(rows * vocab, 1))]);
  double last_busy = 0;
  for (int k = 0; k < m; ++k) {
    const MicroBatch& part = parts[static_cast<size_t>(k)];
    const std::vector<float>& msg = logits_in[static_cast<size_t>(k)];
    for (size_t j = 0; j < part.rows.size(); ++j) {
      std::memcpy(storage.get() + static_cast<int64_t>(part.rows[j]) * vocab,
                  msg.data() + static_cast<int64_t>(j) * vocab, static_cast<size_t>(vocab) * sizeof(float));
    }
    last_busy += msg.back();
  }
  stages_[static_cast<size_t>(pp - 1)].busy_seconds += last_busy;
  pipeline_seconds_ += seconds_since(start);
  if (!out) return;
  out->view = Tensor(storage.get(), DType::F32, {rows, vocab}, Device::Cpu);
  out->storage = std::shared_ptr<void>(storage, storage.get());
}

Logits ModelRunner::download(const StepLogits& logits, int64_t first_row, int64_t num_rows) {
  CYPRIS_CHECK(first_row >= 0 && num_rows >= 0 && first_row + num_rows <= logits.rows(),
               "logits rows [{}, {}) are outside the step's {} rows", first_row, first_row + num_rows, logits.rows());
  Logits out;
  out.rows = num_rows;
  out.vocab = logits.vocab();
  out.data.resize(static_cast<size_t>(out.rows * out.vocab));
  if (num_rows == 0) return out;
  const Tensor& t = logits.view;
  const int64_t ld = row_stride(t);
  Tensor rows(static_cast<float*>(t.data) + first_row * ld, DType::F32, {num_rows, out.vocab}, t.device);
  rows.device_index = t.device_index;
  if (ld != out.vocab) rows.strides = {ld, 1};
  if (t.device == Device::Cpu) {
    // Host memory (a CPU stage's, or the logits another process sent): plain copies.
    for (int64_t i = 0; i < num_rows; ++i) {
      std::memcpy(out.data.data() + i * out.vocab, static_cast<const float*>(t.data) + (first_row + i) * ld,
                  static_cast<size_t>(out.vocab) * sizeof(float));
    }
    return out;
  }
  on_logits_rank([&] { logits_rank().backend->download(rows, out.data.data()); });
  return out;
}

void ModelRunner::on_logits_rank(const std::function<void()>& fn) {
  if (!workers_) return fn();
  const int target = (pipeline_parallel_size() - 1) * tp_;
  workers_->run([&](int rank) {
    if (rank == target) fn();
  });
}

void ModelRunner::forward_rank(Rank& r, const BatchContext& b, const StageHandoff* stage_in, StageHandoff* handoff,
                               StepLogits* out) {
  BatchUpload upload(*r.backend, b);
  ForwardInputs& in = upload.in;
  in.stage_in = stage_in;
  in.stage_out = handoff;
  DeviceTensor logits = r.model->forward(in, r.kv_cache);
  if (!out) return;
  out->view = logits.view;
  out->storage = std::move(logits.storage);
}

// ------------------------------------------------------------------------------------------------
// GPU sampling

bool ModelRunner::can_sample_on_device() const {
#if CYPRIS_HAVE_CUDA
  if (pipe_comm_) return false;  // MPI stages: the logits reach process 0 in host memory
  const char* env = std::getenv("CYPRIS_GPU_SAMPLING");  // read each step: tests switch it
  return !(env && std::string_view(env) == "0") &&
         ranks_[static_cast<size_t>(pipeline_parallel_size() - 1) * tp_].backend->device() == Device::Cuda;
#else
  return false;
#endif
}

std::vector<SampleOutput> ModelRunner::sample_on_device(const StepLogits& logits, int64_t first_row,
                                                        std::span<const SamplerRow> rows, int max_log_probs) {
  CYPRIS_CHECK(can_sample_on_device(), "GPU sampling needs a CUDA backend");
  const int64_t n = static_cast<int64_t>(rows.size());
  CYPRIS_CHECK(first_row >= 0 && first_row + n <= logits.rows(), "GPU sampling: rows [{}, {}) of {} logits rows",
               first_row, first_row + n, logits.rows());
  if (rows.empty()) return {};
  const GpuSamplingInputs in = build_gpu_sampling_inputs(rows, max_log_probs);
  const Tensor& t = logits.view;
  Tensor view(static_cast<float*>(t.data) + first_row * row_stride(t), DType::F32, {n, logits.vocab()}, t.device);
  view.device_index = t.device_index;
  if (row_stride(t) != logits.vocab()) view.strides = {row_stride(t), 1};
  GpuSamplingOutputs res;
  res.resize(in.rows(), in.max_top);
  // The logits are the logits rank's (StepLogits: the last stage's rank 0); its backend samples them
  // (Backend::sample_rows).
  on_logits_rank([&] { logits_rank().backend->sample_rows(view, in.host_batch(nullptr, 0, 0), res.results()); });
  return finish_gpu_sampling(rows, in, res);
}

}  // namespace cypris
