// ModelRunner: owns the backend, the model and the paged KV cache, and runs one flattened batch
// (BatchContext) to logits. The engine core calls execute() once per step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/loader/weights.h"
#include "engine/runtime/batch_context.h"
#include "models/model.h"

namespace cypris {

struct ModelRunnerOptions {
  std::filesystem::path model_dir;  // a local folder with config.json (+ weights unless load_format is dummy)
  LoadOptions load;
  int threads = 0;         // CPU backend threads; <= 0: one per hardware thread
  int block_size = 16;     // tokens per KV-cache block
  int64_t num_blocks = 0;  // 0: enough for one sequence of max_model_len
  ParallelConfig parallel;
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

  // Writes the batch's K/V into the cache and returns logits [logits_indices.size(), vocab].
  Logits execute(const BatchContext& batch);

  const ModelConfig& config() const { return model_->config(); }
  DType weight_dtype() const { return weight_dtype_; }
  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  // K and V of every layer for one block (fp32 on the CPU): for sizing the cache from a memory budget.
  int64_t kv_cache_bytes_per_block() const {
    return int64_t{2} * model_->num_layers() * block_size_ * model_->num_kv_heads() * model_->head_dim() * 4;
  }
  Backend& backend() { return *backend_; }
  Model& model() { return *model_; }
  void set_debug_hook(DebugHook hook) { model_->set_debug_hook(std::move(hook)); }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::vector<KvCacheLayer> kv_cache_;
  DType weight_dtype_ = DType::F32;
  int block_size_ = 16;
  int64_t num_blocks_ = 0;
};

}  // namespace cypris
