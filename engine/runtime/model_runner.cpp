#include "engine/runtime/model_runner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/common/phase_timer.h"
#include "engine/config/kv_cache_dtype.h"
#include "engine/backend/backend_factory.h"
#include "engine/loader/gguf.h"
#include "engine/runtime/memory_profile.h"
#include "engine/runtime/kv_cache_scales.h"
#include "engine/backend/tp_workers.h"
#include "kernels/cpu/attention.h"  // is_kv_cache_dtype
#include "engine/backend/mpi_world.h"
#include "engine/runtime/mpi_worker.h"
#include "engine/sampling/gpu_sampling.h"
#include "models/registry/registry.h"

namespace cypris {

ModelRunner::ModelRunner(const ModelRunnerOptions& options) {
  PhaseTimer startup("model start-up");  // one log line: where the start-up time went
  CYPRIS_CHECK(options.block_size > 0 && options.block_size <= 1024, "block size {} must be in [1, 1024]",
               options.block_size);
  // The one check of the tensor-parallel size along the engine's path: its range here, the model's
  // shapes in check_tensor_parallel, the GPU count where the communicators are made.
  const int tp = options.parallel.world_size;
  CYPRIS_CHECK(tp >= 1 && tp <= 256, "--tensor-parallel-size {} must be in [1, 256]", tp);
  const ModelConfig cfg =
      options.config ? *options.config : load_model_config(model_families(), options.model_dir, options.load.overrides);
  resolve_architecture(cfg);  // fail before reading any weights
  tp_ = tp;
  // MPI: this process is one rank; every process has the same config, or none starts (mpi_worker.h).
  MpiWorld* world = options.mpi ? &MpiWorld::instance() : nullptr;
  if (world) {
    first_rank_ = world->rank();
    drives_processes_ = world->rank() == 0;
    check_mpi_layout(*world, tp, cfg, options);
  }
  if (options.load.load_format != "dummy" && is_gguf_path(options.model_dir)) {
    // Which llama.cpp types the file holds ("Q4_K: 193 tensors, Q6_K: 33, F32: 65").
    const GgufModel gguf(options.model_dir);
    LOG_INFO("GGUF v{} {}: {}", gguf.main().version(), gguf.describe(), gguf_type_mix(gguf));
  }
  check_tensor_parallel(cfg, tp);
  startup.mark("config");
  weight_dtype_ = resolve_dtype(options.load.dtype, cfg.torch_dtype);
  block_size_ = options.block_size;
  max_loras_ = options.max_loras;
  max_lora_rank_ = options.max_lora_rank;
  // An adapter loads on process 0 between steps; the step messages do not carry it to the others.
  CYPRIS_CHECK(!(world && max_loras_ > 0),
               "--enable-lora with ranks in several processes (MPI) is not supported yet; use one process");
  ranks_.resize(world ? 1 : static_cast<size_t>(tp));
  const Device device = resolve_device(options.device) == "cuda" ? Device::Cuda : Device::Cpu;
  // Activations in the model dtype on a GPU (fp32 accumulation inside the kernels, as vLLM); the
  // CPU backend and the fp32-GEMM equivalence mode keep fp32.
  const bool act16 = device == Device::Cuda && !options.cuda_fp32_gemm &&
                     (weight_dtype_ == DType::BF16 || weight_dtype_ == DType::F16);
  activation_dtype_ = act16 ? weight_dtype_ : DType::F32;
  kv_cache_dtype_ = options.kv_cache_dtype.value_or(activation_dtype_);
  // What the attention kernels can store (kernels/cpu/attention.h); every --kv-cache-dtype name parses
  // to one of these (engine/config/kv_cache_dtype.h).
  CYPRIS_CHECK(is_kv_cache_dtype(kv_cache_dtype_), "KV cache dtype {} cannot hold a KV cache (--kv-cache-dtype: {})",
               dtype_name(kv_cache_dtype_), fmt::join(kv_cache_dtype_names(), ", "));
  if (world && tp > 1) {
    process_comm_ = world->make_communicator(device, world->local_rank());
    build_rank(options, cfg, 0, options.threads);
  } else if (tp == 1) {
    build_rank(options, cfg, 0, options.threads);
  } else {
    // CPU ranks share the cores: each gets its part of --threads. GPU ranks get one GPU each.
    const int total = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
    const int per_rank = std::max(1, total / tp);
    workers_ = make_tp_workers(device, tp);
    workers_->run([&](int rank) { build_rank(options, cfg, rank, per_rank); });
  }
  startup.mark("weights");
  graph_policy_.max_seq_len_to_capture = std::min<int64_t>(options.max_seq_len_to_capture, cfg.max_model_len);
  graph_policy_.sizes = graph_capture_sizes(options.max_num_seqs);
  const bool capturable = model().graph_capturable();
  graph_policy_.enforce_eager =
      options.enforce_eager || device != Device::Cuda || tp > 1 || !capturable || lora_enabled();
  if (!options.enforce_eager && device == Device::Cuda && lora_enabled()) {
    LOG_INFO("--enforce-eager false: no CUDA graphs with --enable-lora yet (adapters load into weights allocated "
             "when first used); running eagerly");
  } else if (!options.enforce_eager && device == Device::Cuda && !capturable) {
    LOG_INFO("--enforce-eager false: {} routes its experts on the host, which CUDA graphs cannot capture; "
             "running eagerly",
             resolve_architecture(cfg));
  } else if (!options.enforce_eager && tp > 1) {
    LOG_WARN(
        "--enforce-eager false: no CUDA graphs at --tensor-parallel-size {} yet (the vocab-parallel embedding "
        "reads token ids on the host); running eagerly",
        tp);
  }
  // The cache is sized once the weights are in place (on a GPU, from the memory left).
  kv_block_bytes_ = cypris::kv_cache_bytes_per_block(cfg, block_size_, tp, kv_cache_dtype_);
  if (options.num_blocks > 0) {
    num_blocks_ = options.num_blocks;
  } else if (backend().device() == Device::Cuda && options.gpu_memory_utilization > 0) {
    num_blocks_ = blocks_from_device_memory(cfg, options);
  } else if (options.cpu_kv_cache_bytes > 0) {
    num_blocks_ = static_cast<int64_t>(options.cpu_kv_cache_bytes / static_cast<double>(kv_block_bytes_));
    CYPRIS_CHECK(num_blocks_ >= 1, "--cpu-kvcache-space {} GiB holds no KV block of {:.1f} KiB for this model",
                 options.cpu_kv_cache_bytes / (1024.0 * 1024.0 * 1024.0),
                 static_cast<double>(kv_block_bytes_) / 1024.0);
  } else {
    num_blocks_ = (cfg.max_model_len + block_size_ - 1) / block_size_;
  }
  // Every process holds the same blocks: the fewest any of them has room for (GPUs may differ).
  if (world) num_blocks_ = world->all_reduce_min(num_blocks_);
  if (backend().device() != Device::Cuda) {
    // The cache's pages are taken only as they are used, so a size memory cannot back would start
    // and fail much later (or die in the OOM killer): refuse it now (issue #20).
    const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    const double want = static_cast<double>(num_blocks_) * static_cast<double>(kv_block_bytes_);  // all ranks
    constexpr double kGiB = 1 << 30;
    CYPRIS_CHECK(phys <= 0 || want <= 0.9 * phys,
                 "{}: the KV cache would take {:.1f} GiB ({} blocks of {:.1f} KiB), more than 90% of this machine's "
                 "{:.1f} GiB of memory; lower it",
                 options.num_blocks > 0 ? fmt::format("--num-gpu-blocks-override {}", options.num_blocks)
                                        : fmt::format("--cpu-kvcache-space {}", options.cpu_kv_cache_bytes / kGiB),
                 want / kGiB, num_blocks_, static_cast<double>(kv_block_bytes_) / 1024.0, phys / kGiB);
  }
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

void ModelRunner::build_rank(const ModelRunnerOptions& options, const ModelConfig& cfg, int rank, int threads) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  BackendOptions bo;
  bo.device = options.device;
  bo.threads = threads;
  bo.cuda_device = process_comm_ ? MpiWorld::instance().local_rank() : rank;
  bo.cuda_fp32_gemm = options.cuda_fp32_gemm;
  bo.cuda_activation_dtype = activation_dtype_;
  r.backend = make_backend(bo);
  // Each rank opens the checkpoint itself and reads only its slices.
  auto weights = open_weight_source(model_families(), options.model_dir, cfg, options.load);
  // fp8 cache scales first: a bad --quantization-param-path fails before the weights are read.
  ResolvedKvScales scales =
      resolve_kv_cache_scales(kv_cache_dtype_, options.load.load_format == "dummy" ? nullptr : weights.get(),
                              options.quantization_param_path, cfg.num_hidden_layers, first_rank_ + rank);
  r.kv_scales = std::move(scales.layers);
  if (rank == 0) kv_scales_source_ = std::move(scales.source);
  ModelBuildOptions build;
  build.weight_dtype = weight_dtype_;
  build.parallel = {first_rank_ + rank, tp_};
  build.comm = workers_ ? &workers_->comm(rank) : process_comm_.get();
  if (max_loras_ > 0) {
    r.lora = std::make_unique<LoraSites>(*r.backend, max_loras_, max_lora_rank_);
    build.lora = r.lora.get();
  }
  r.model = build_model(cfg, *weights, *r.backend, build);
}

void ModelRunner::allocate_kv_cache(Rank& r, const ModelConfig& cfg) {
  const std::vector<int64_t> shape = {num_blocks_, block_size_, r.model->num_kv_heads(), r.model->head_dim()};
  r.kv_cache.resize(cfg.num_hidden_layers);
  for (size_t l = 0; l < r.kv_cache.size(); ++l) {
    KvCacheLayer& layer = r.kv_cache[l];
    // Uninitialised: attention reads only slots written earlier, and untouched pages cost no RAM.
    layer.k = r.backend->empty(kv_cache_dtype_, shape);
    layer.v = r.backend->empty(kv_cache_dtype_, shape);
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
  Rank& r0 = ranks_.front();
  if (!hook || r0.backend->device() == Device::Cpu) {
    r0.model->set_debug_hook(std::move(hook));
    return;
  }
  Backend* be = r0.backend.get();
  r0.model->set_debug_hook([be, hook = std::move(hook)](const std::string& name, const Tensor& t) {
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

int64_t ModelRunner::blocks_from_device_memory(const ModelConfig& cfg, const ModelRunnerOptions& options) {
  // vLLM's profile run: what the weights left in use, then the peak of the largest step the
  // scheduler can build and, with graphs, of the largest graph's decode batch. Rank 0's device
  // stands for all (the ranks hold equal shards).
  Backend& be = backend();
  be.synchronize();
  const DeviceMemoryInfo mem = be.memory_info();
  GpuMemoryBudget m;
  m.utilization = options.gpu_memory_utilization;
  m.total_bytes = mem.total_bytes;
  m.used_bytes = mem.total_bytes - mem.free_bytes;
  m.bytes_per_block = kv_cache_bytes_per_block() / tensor_parallel_size();
  if (m.utilization > 0 && m.utilization <= 1.0) {
    const int64_t tokens = std::max<int64_t>(1, options.max_num_batched_tokens);
    m.activation_peak =
        profile_peak(cfg, make_profile_prefill_batch(tokens, options.max_num_seqs, cfg.max_model_len, block_size_));
    if (!graph_policy_.enforce_eager) {
      // The graphs' private pool holds about the largest graph's activations; its best-fit reuse
      // (blocks up to twice a request) can need up to that again for the smaller sizes.
      constexpr size_t kPerGraph = size_t{1} << 20;  // instantiated graph, rough
      const size_t decode = profile_peak(
          cfg, make_profile_decode_batch(graph_policy_.sizes.back(),
                                         static_cast<int32_t>(graph_policy_.max_seq_len_to_capture), block_size_));
      m.graph_reserve = 2 * decode + kPerGraph * graph_policy_.sizes.size();
    }
  }
  // The GPU sampler allocates its scratch on first use, after the cache: keep room for a full batch.
  if (can_sample_on_device()) {
    m.sampler_scratch = static_cast<size_t>(std::max<int64_t>(1, options.max_num_seqs)) *
                        static_cast<size_t>(cfg.vocab_size) * (sizeof(float) + sizeof(int32_t));
  }
  const int64_t blocks = kv_cache_blocks(m);
  constexpr double kGiB = 1 << 30;
  LOG_INFO(
      "GPU memory: {:.2f} GiB total, {:.2f} GiB in use after the weights, activation peak {:.2f} GiB (profiled), "
      "{:.2f} GiB kept for CUDA graphs, {:.2f} GiB for GPU sampling; KV cache gets {} blocks ({:.2f} GiB)",
      static_cast<double>(m.total_bytes) / kGiB, static_cast<double>(m.used_bytes) / kGiB,
      static_cast<double>(m.activation_peak) / kGiB, static_cast<double>(m.graph_reserve) / kGiB,
      static_cast<double>(m.sampler_scratch) / kGiB, blocks,
      static_cast<double>(blocks) * static_cast<double>(m.bytes_per_block) / kGiB);
  return blocks;
}

size_t ModelRunner::profile_peak(const ModelConfig& cfg, const BatchContext& b) {
  b.validate(1, block_size_);
  for_each_rank([&](Rank& r) {
    // The profile batches write no K/V and read every context through block 0.
    r.kv_cache.resize(cfg.num_hidden_layers);
    const std::vector<int64_t> shape = {1, block_size_, r.model->num_kv_heads(), r.model->head_dim()};
    for (auto& layer : r.kv_cache) {
      layer.k = r.backend->zeros(kv_cache_dtype_, shape);
      layer.v = r.backend->zeros(kv_cache_dtype_, shape);
    }
    r.backend->synchronize();
    r.backend->reset_peak_memory();
    forward_rank(r, b, nullptr);
    r.backend->synchronize();
  });
  const size_t peak = backend().peak_memory_bytes();
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
  for_each_rank([&](Rank& r) { r.lora->load(slot, adapter); });
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
  if (backend().device() != Device::Cpu || drives_processes_) {
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
      forward_rank(ranks_.front(), b, &out);
    } catch (const Error& e) {
      // The other processes ran (or wait in) this step's collectives: they cannot be brought back in
      // step with this one, so the job ends (in-flight requests get this error).
      MpiWorld& world = MpiWorld::instance();
      if (!world.failed()) world.fail(fmt::format("process 0 failed a step the others ran: {}", e.what()));
      throw;
    }
  } else if (!workers_) {
    forward_rank(ranks_.front(), b, &out);
  } else {
    workers_->run([&](int rank) { forward_rank(ranks_[static_cast<size_t>(rank)], b, rank == 0 ? &out : nullptr); });
  }
  return out;
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
  on_rank0([&] { backend().download(rows, out.data.data()); });
  return out;
}

void ModelRunner::on_rank0(const std::function<void()>& fn) {
  if (!workers_) return fn();
  workers_->run([&](int rank) {
    if (rank == 0) fn();
  });
}

void ModelRunner::forward_rank(Rank& r, const BatchContext& b, StepLogits* out) {
  Backend& be = *r.backend;
  const int64_t n = b.num_tokens();
  ForwardInputs in;
  DeviceTensor ids = be.upload(b.token_ids.data(), DType::I32, {n});
  DeviceTensor pos = be.upload(b.positions.data(), DType::I32, {n});
  DeviceTensor slots = be.upload(b.slot_mapping.data(), DType::I64, {n});
  DeviceTensor qsl = be.upload(b.query_start_loc.data(), DType::I32, {b.num_seqs() + 1});
  DeviceTensor lens = be.upload(b.seq_lens.data(), DType::I32, {b.num_seqs()});
  DeviceTensor tables = be.upload(b.block_tables.data(), DType::I32, {b.num_seqs(), int64_t{b.max_blocks_per_seq}});
  DeviceTensor lidx = be.upload(b.logits_indices.data(), DType::I32, {static_cast<int64_t>(b.logits_indices.size())});
  in.token_ids = ids.view;
  in.positions = pos.view;
  in.logits_indices = lidx.view;
  in.attn.query_start_loc = qsl.view;
  in.attn.seq_lens = lens.view;
  in.attn.block_tables = tables.view;
  in.attn.slot_mapping = slots.view;
  in.attn.num_seqs = b.num_seqs();
  in.attn.max_blocks_per_seq = b.max_blocks_per_seq;
  in.attn.max_query_len = b.max_query_len;  // the scheduler's maxima (validate() checked them)
  in.attn.max_seq_len = b.max_seq_len;
  DeviceTensor lora_slots;
  if (!b.lora_slots.empty()) {
    lora_slots = be.upload(b.lora_slots.data(), DType::I32, {n});
    in.lora_slots = lora_slots.view;
  }
  DeviceTensor logits = r.model->forward(in, r.kv_cache);
  if (!out) return;
  out->view = logits.view;
  out->storage = std::move(logits.storage);
}

// ------------------------------------------------------------------------------------------------
// GPU sampling

bool ModelRunner::can_sample_on_device() const {
#if CYPRIS_HAVE_CUDA
  const char* env = std::getenv("CYPRIS_GPU_SAMPLING");  // read each step: tests switch it
  return !(env && std::string_view(env) == "0") && ranks_.front().backend->device() == Device::Cuda;
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
  // The logits are rank 0's (StepLogits); its backend samples them (Backend::sample_rows).
  on_rank0([&] { backend().sample_rows(view, in.host_batch(nullptr, 0, 0), res.results()); });
  return finish_gpu_sampling(rows, in, res);
}

}  // namespace cypris
