#include "engine/runtime/model_runner.h"

#include <algorithm>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/runtime/backend_factory.h"
#include "models/registry/registry.h"

namespace cypris {

ModelRunner::ModelRunner(const ModelRunnerOptions& options) {
  CYPRIS_CHECK(options.block_size > 0 && options.block_size <= 1024, "block size {} must be in [1, 1024]",
               options.block_size);
  CYPRIS_CHECK(options.parallel.world_size == 1, "tensor parallel size {} is not supported yet on the CPU backend",
               options.parallel.world_size);
  const ModelConfig cfg = load_model_config(options.model_dir, options.load.overrides);
  resolve_architecture(cfg);  // fail before reading any weights
  weight_dtype_ = resolve_dtype(options.load.dtype, cfg.torch_dtype);
  BackendOptions bo;
  bo.device = options.device;
  bo.threads = options.threads;
  bo.cuda_fp32_gemm = options.cuda_fp32_gemm;
  backend_ = make_backend(bo);
  auto weights = open_weight_source(options.model_dir, cfg, options.load);
  ModelBuildOptions build;
  build.weight_dtype = weight_dtype_;
  build.parallel = options.parallel;
  model_ = build_model(cfg, *weights, *backend_, build);
  block_size_ = options.block_size;
  num_blocks_ = options.num_blocks > 0 ? options.num_blocks : (cfg.max_model_len + block_size_ - 1) / block_size_;
  if (options.num_blocks <= 0 && backend_->device() == Device::Cuda && options.gpu_memory_utilization > 0) {
    num_blocks_ = blocks_from_device_memory(cfg, options);
  }
  const std::vector<int64_t> shape = {num_blocks_, block_size_, model_->num_kv_heads(), model_->head_dim()};
  kv_cache_.resize(cfg.num_hidden_layers);
  for (auto& layer : kv_cache_) {
    // Uninitialised: attention reads only slots written earlier, and untouched pages cost no RAM.
    layer.k = backend_->empty(DType::F32, shape);
    layer.v = backend_->empty(DType::F32, shape);
  }
  LOG_INFO("loaded {} ({}, {} layers, weights {}) from {}; KV cache {} blocks x {} tokens", resolve_architecture(cfg),
           weights->describe(), cfg.num_hidden_layers, dtype_name(weight_dtype_), options.model_dir.string(),
           num_blocks_, block_size_);
}

ModelRunner::~ModelRunner() = default;

void ModelRunner::set_debug_hook(DebugHook hook) {
  if (!hook || backend_->device() == Device::Cpu) {
    model_->set_debug_hook(std::move(hook));
    return;
  }
  Backend* be = backend_.get();
  model_->set_debug_hook([be, hook = std::move(hook)](const std::string& name, const Tensor& t) {
    if (t.ndim() != 2) return hook(name, t);
    const int64_t rows = t.shape[0], cols = t.shape[1], ld = row_stride(t);
    Buffer host(static_cast<size_t>(rows * cols) * dtype_size(t.dtype));
    for (int64_t r = 0; r < rows; ++r) {  // row by row: the intermediate may be a column slice
      Tensor row(static_cast<char*>(t.data) + r * ld * dtype_size(t.dtype), t.dtype, {cols}, t.device);
      be->download(row, static_cast<char*>(host.data()) + r * cols * dtype_size(t.dtype));
    }
    hook(name, Tensor(host.data(), t.dtype, {rows, cols}, Device::Cpu));
  });
}

int64_t ModelRunner::blocks_from_device_memory(const ModelConfig& cfg, const ModelRunnerOptions& options) {
  // Not a profiled peak (vLLM runs a dummy forward): an estimate of one step's fp32 activations
  // (residual, hidden, qkv, attention, gate_up, act and GEMM scratch per token, logits per
  // sequence), doubled for the allocator's rounding, plus room for cuBLAS and the CUDA context.
  backend_->synchronize();
  const DeviceMemoryInfo mem = backend_->memory_info();
  CYPRIS_CHECK(options.gpu_memory_utilization <= 1.0, "--gpu-memory-utilization {} must be in (0, 1]",
               options.gpu_memory_utilization);
  const double per_token = 4.0 * (3.0 * cfg.hidden_size + 2.0 * cfg.num_attention_heads * cfg.head_dim +
                                  2.0 * cfg.num_key_value_heads * cfg.head_dim + 4.0 * cfg.intermediate_size);
  const double activations = 2.0 * (per_token * static_cast<double>(options.max_num_batched_tokens) +
                                    4.0 * static_cast<double>(cfg.vocab_size) * static_cast<double>(options.max_num_seqs));
  const double reserve = activations + 512.0 * (1 << 20);
  const double used = static_cast<double>(mem.total_bytes - mem.free_bytes);
  const double budget = options.gpu_memory_utilization * static_cast<double>(mem.total_bytes) - used - reserve;
  const int64_t blocks = static_cast<int64_t>(budget / static_cast<double>(kv_cache_bytes_per_block()));
  CYPRIS_CHECK(blocks >= 1,
               "--gpu-memory-utilization {}: no room for the KV cache ({:.2f} GiB in use of {:.2f} GiB after loading "
               "the weights, {:.2f} GiB kept for activations); raise it or lower --max-num-batched-tokens",
               options.gpu_memory_utilization, used / (1 << 30), static_cast<double>(mem.total_bytes) / (1 << 30),
               reserve / (1 << 30));
  LOG_INFO("GPU memory: {:.2f} GiB total, {:.2f} GiB in use after the weights; KV cache gets {} blocks",
           static_cast<double>(mem.total_bytes) / (1 << 30), used / (1 << 30), blocks);
  return blocks;
}

Logits ModelRunner::execute(const BatchContext& b) {
  b.validate(num_blocks_, block_size_);
  const int64_t n = b.num_tokens();
  int max_query_len = 0, max_seq_len = 0;
  for (int s = 0; s < b.num_seqs(); ++s) {
    max_query_len = std::max(max_query_len, b.query_start_loc[s + 1] - b.query_start_loc[s]);
    max_seq_len = std::max(max_seq_len, b.seq_lens[s]);
  }
  if (backend_->device() != Device::Cpu) {
    // Device kernels cannot throw: check on the host what the CPU kernels check as they go.
    const int64_t vocab = model_->config().vocab_size;
    const int64_t max_pos = model_->config().max_model_len;
    for (int64_t t = 0; t < n; ++t) {
      CYPRIS_CHECK(b.token_ids[t] >= 0 && b.token_ids[t] < vocab, "token id {} at position {} is out of range [0, {})",
                   b.token_ids[t], t, vocab);
      CYPRIS_CHECK(b.positions[t] >= 0 && b.positions[t] < max_pos,
                   "position {} of token {} is outside the rotary table [0, {}) (--max-model-len)", b.positions[t], t,
                   max_pos);
    }
  }
  ForwardInputs in;
  DeviceTensor ids = backend_->upload(b.token_ids.data(), DType::I32, {n});
  DeviceTensor pos = backend_->upload(b.positions.data(), DType::I32, {n});
  DeviceTensor slots = backend_->upload(b.slot_mapping.data(), DType::I64, {n});
  DeviceTensor qsl = backend_->upload(b.query_start_loc.data(), DType::I32, {b.num_seqs() + 1});
  DeviceTensor lens = backend_->upload(b.seq_lens.data(), DType::I32, {b.num_seqs()});
  DeviceTensor tables =
      backend_->upload(b.block_tables.data(), DType::I32, {b.num_seqs(), int64_t{b.max_blocks_per_seq}});
  DeviceTensor lidx =
      backend_->upload(b.logits_indices.data(), DType::I32, {static_cast<int64_t>(b.logits_indices.size())});
  in.token_ids = ids.view;
  in.positions = pos.view;
  in.logits_indices = lidx.view;
  in.attn.query_start_loc = qsl.view;
  in.attn.seq_lens = lens.view;
  in.attn.block_tables = tables.view;
  in.attn.slot_mapping = slots.view;
  in.attn.num_seqs = b.num_seqs();
  in.attn.max_blocks_per_seq = b.max_blocks_per_seq;
  in.attn.max_query_len = max_query_len;
  in.attn.max_seq_len = max_seq_len;
  DeviceTensor logits = model_->forward(in, kv_cache_);
  Logits out;
  out.rows = logits.view.shape[0];
  out.vocab = logits.view.shape[1];
  out.data.resize(static_cast<size_t>(out.rows * out.vocab));
  backend_->download(logits.view, out.data.data());
  return out;
}

}  // namespace cypris
