#include "engine/runtime/model_runner.h"

#include <algorithm>
#include <thread>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/runtime/cpu/cpu_backend.h"
#include "engine/runtime/tp_workers.h"
#include "models/registry/registry.h"

namespace cypris {

ModelRunner::ModelRunner(const ModelRunnerOptions& options) {
  CYPRIS_CHECK(options.block_size > 0 && options.block_size <= 1024, "block size {} must be in [1, 1024]",
               options.block_size);
  const int tp = options.parallel.world_size;
  CYPRIS_CHECK(tp >= 1 && tp <= 256, "--tensor-parallel-size {} must be in [1, 256]", tp);
  const ModelConfig cfg = load_model_config(options.model_dir, options.load.overrides);
  resolve_architecture(cfg);  // fail before reading any weights
  check_tensor_parallel(cfg, tp);
  weight_dtype_ = resolve_dtype(options.load.dtype, cfg.torch_dtype);
  block_size_ = options.block_size;
  num_blocks_ = options.num_blocks > 0 ? options.num_blocks : (cfg.max_model_len + block_size_ - 1) / block_size_;
  ranks_.resize(static_cast<size_t>(tp));
  if (tp == 1) {
    build_rank(options, cfg, 0, options.threads);
  } else {
    // The ranks share the cores: each gets its part of --threads.
    const int total = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
    const int per_rank = std::max(1, total / tp);
    workers_ = make_tp_workers(Device::Cpu, tp);
    workers_->run([&](int rank) { build_rank(options, cfg, rank, per_rank); });
  }
  LOG_INFO("loaded {} ({} layers, weights {}, tensor parallel {}) from {}; KV cache {} blocks x {} tokens",
           resolve_architecture(cfg), cfg.num_hidden_layers, dtype_name(weight_dtype_), tp, options.model_dir.string(),
           num_blocks_, block_size_);
}

ModelRunner::~ModelRunner() {
  if (!workers_) return;
  // Each rank frees its shard on its own thread (a GPU rank's memory belongs to its device).
  try {
    workers_->run([&](int rank) { ranks_[static_cast<size_t>(rank)] = Rank{}; });
  } catch (const std::exception& e) {
    LOG_ERROR("freeing the tensor parallel ranks: {}", e.what());
  }
}

void ModelRunner::build_rank(const ModelRunnerOptions& options, const ModelConfig& cfg, int rank, int threads) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  r.backend = std::make_unique<CpuBackend>(threads);
  // Each rank opens the checkpoint itself and reads only its slices.
  auto weights = open_weight_source(options.model_dir, cfg, options.load);
  ModelBuildOptions build;
  build.weight_dtype = weight_dtype_;
  build.parallel = {rank, static_cast<int>(ranks_.size())};
  build.comm = workers_ ? &workers_->comm(rank) : nullptr;
  r.model = build_model(cfg, *weights, *r.backend, build);
  const std::vector<int64_t> shape = {num_blocks_, block_size_, r.model->num_kv_heads(), r.model->head_dim()};
  r.kv_cache.resize(cfg.num_hidden_layers);
  for (auto& layer : r.kv_cache) {
    // Uninitialised: attention reads only slots written earlier, and untouched pages cost no RAM.
    layer.k = r.backend->empty(DType::F32, shape);
    layer.v = r.backend->empty(DType::F32, shape);
  }
}

void ModelRunner::for_each_rank(const std::function<void(Rank&)>& fn) {
  if (!workers_) {
    fn(ranks_.front());
    return;
  }
  workers_->run([&](int rank) { fn(ranks_[static_cast<size_t>(rank)]); });
}

Logits ModelRunner::execute(const BatchContext& b) {
  b.validate(num_blocks_, block_size_);
  Logits out;
  if (!workers_) {
    forward_rank(ranks_.front(), b, &out);
  } else {
    workers_->run([&](int rank) { forward_rank(ranks_[static_cast<size_t>(rank)], b, rank == 0 ? &out : nullptr); });
  }
  return out;
}

void ModelRunner::forward_rank(Rank& r, const BatchContext& b, Logits* out) {
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
  DeviceTensor logits = r.model->forward(in, r.kv_cache);
  if (!out) return;
  out->rows = logits.view.shape[0];
  out->vocab = logits.view.shape[1];
  out->data.resize(static_cast<size_t>(out->rows * out->vocab));
  be.download(logits.view, out->data.data());
}

}  // namespace cypris
