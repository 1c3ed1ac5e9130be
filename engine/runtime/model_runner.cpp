#include "engine/runtime/model_runner.h"

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/runtime/cpu/cpu_backend.h"
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
  backend_ = std::make_unique<CpuBackend>(options.threads);
  auto weights = open_weight_source(options.model_dir, cfg, options.load);
  ModelBuildOptions build;
  build.weight_dtype = weight_dtype_;
  build.parallel = options.parallel;
  model_ = build_model(cfg, *weights, *backend_, build);
  block_size_ = options.block_size;
  num_blocks_ = options.num_blocks > 0 ? options.num_blocks : (cfg.max_model_len + block_size_ - 1) / block_size_;
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

Logits ModelRunner::execute(const BatchContext& b) {
  b.validate(num_blocks_, block_size_);
  const int64_t n = b.num_tokens();
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
  DeviceTensor logits = model_->forward(in, kv_cache_);
  Logits out;
  out.rows = logits.view.shape[0];
  out.vocab = logits.view.shape[1];
  out.data.resize(static_cast<size_t>(out.rows * out.vocab));
  backend_->download(logits.view, out.data.data());
  return out;
}

}  // namespace cypris
