// Loading a model's weights for one tensor-parallel rank: name resolution ("model." prefix
// optional), the shard specs of the head / MLP / vocabulary layouts, norms and biases in fp32, and
// the one function every linear weight goes through (load_linear), which decides the weight's
// stored dtype: the requested --dtype, or the checkpoint's own quantized type when it has one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/loader/weights.h"
#include "engine/backend/backend.h"
#include "models/model.h"

namespace cypris {

// The head and MLP layout of one rank (vLLM's tensor-parallel linear layers).
struct TpLayout {
  int rank = 0;
  int world_size = 1;
  int heads = 0;     // query heads on this rank
  int kv_heads = 0;  // KV heads on this rank (1 when replicated over ranks)
  int head_dim = 0;
  ShardSpec rows;     // split on dim 0 (column-parallel outputs)
  ShardSpec cols;     // split on dim 1 (row-parallel inputs)
  ShardSpec kv_rows;  // this rank's K/V heads: split on dim 0, or the shared head when replicated
  int64_t q_width() const { return int64_t{heads} * head_dim; }
  int64_t kv_width() const { return int64_t{kv_heads} * head_dim; }
};

// Checks the layout (tensor_parallel checks, rank, communicator) and returns it. num_heads /
// num_kv_heads / head_dim default to the config's.
TpLayout make_tp_layout(const ModelConfig& cfg, const ModelBuildOptions& opt);

// One tensor (or one row range of a fused tensor) stacked into a merged weight: rows
// [row0 + shard part) of `name`, whose full dim 0 is full_rows. With row0 / row_count set (>= 0),
// the part is the rank's slice of rows [row0, row0 + row_count) of the tensor (a fused checkpoint
// tensor such as Phi-3's qkv_proj), split like `shard`.
struct LinearPart {
  std::string name;
  int64_t full_rows = 0;
  ShardSpec shard;  // split on dim 0, or replicated
  int64_t row0 = -1;
  int64_t row_count = -1;
};

// One product of a linear layer kept quantized over reordered input columns
// (WeightSource::column_segments): out += x[:, columns] · weightᵀ. columns I32 [k_s] on the device.
struct LinearSegment {
  DeviceTensor weight;   // [rows, k_s] in a W4/W8 block type
  DeviceTensor columns;  // I32 [k_s]: the input column each weight column multiplies
};

class WeightLoader {
 public:
  WeightLoader(const ModelConfig& cfg, const WeightSource& weights, Backend& backend, const ModelBuildOptions& opt);

  const ModelConfig& config() const { return cfg_; }
  Backend& backend() const { return backend_; }
  const ModelBuildOptions& options() const { return opt_; }
  const WeightSource& source() const { return weights_; }

  // The checkpoint's name for an HF name ("model." prefix dropped when only that exists), or Error.
  std::string resolve(const std::string& name) const;
  bool contains(const std::string& name) const;

  // A norm weight or bias in fp32, replicated; `offset` is added to each element (Gemma's 1 + w).
  DeviceTensor load_f32(const std::string& name, const std::vector<int64_t>& shape, float offset = 0.0f,
                        ShardSpec shard = {}) const;
  // Biases of the parts of a merged column-parallel layer, stacked like the weights.
  DeviceTensor load_stacked_bias(const std::vector<LinearPart>& parts) const;
  // This rank's rows of a [part.full_rows, cols] tensor (split like part.shard) as F32 host memory
  // (per-head weights such as Command R+'s q/k norms, [heads, head_dim]).
  HostTensor load_rows_f32_host(const LinearPart& part, int64_t cols) const;

  // The dtype a linear weight is kept in: the checkpoint's own when it is block-quantized (GGUF),
  // so Backend::linear runs on it as it is; else the requested --dtype.
  DType linear_dtype(const std::string& resolved_name) const;
  // Every linear weight goes through here. Column-parallel / merged: parts stacked row-wise, each
  // [full_rows, cols] split on dim 0; row-parallel: one part whose shard splits dim 1.
  DeviceTensor load_linear(const std::vector<LinearPart>& parts, int64_t cols) const;
  // The segments of one part kept quantized over reordered input columns (act-order GPTQ, EXL2):
  // a column-parallel part's rows or a row-parallel part's input shard. Empty when the part is read
  // whole by load_linear (its source has no segments for it, or the backend keeps their types in
  // --dtype).
  std::vector<LinearSegment> load_linear_segments(const LinearPart& part, int64_t cols) const;
  // The stacked parts cut into runs that can each be stored in one dtype: one run, unless the parts
  // are quantized in different types that the backend keeps (a Q4_K_M GGUF's attn_v in Q6_K beside
  // Q4_K q and k): then one run per type change, so no part is dequantized to --dtype.
  std::vector<std::vector<LinearPart>> same_dtype_runs(const std::vector<LinearPart>& parts, int64_t cols) const;
  // A whole tensor of `shape` in `dtype`, replicated (the embedding table at tp 1).
  DeviceTensor load_replicated(const std::string& name, const std::vector<int64_t>& shape, DType dtype) const;
  // The same in host memory, for a layer that reorders rows before uploading (Cohere's q/k).
  HostTensor load_linear_host(const std::vector<LinearPart>& parts, int64_t cols) const;

  // This rank's vocabulary rows of a [vocab, hidden] tensor, zero-padded to alloc_rows rows
  // (vocab slices of ceil(vocab / tp) rows; the last ranks may hold fewer real rows).
  HostTensor load_vocab_rows(const std::string& name, int64_t vocab_start, int64_t vocab_count, int64_t alloc_rows,
                             DType dtype) const;

 private:
  // Reads rows [row0, row0 + n) of `name` (full shape [full_rows, cols], or [full_rows] when cols
  // is 0) into dst, in chunks that the shard specs can address.
  void read_rows(const std::string& name, int64_t full_rows, int64_t cols, int64_t row0, int64_t n, DType dtype,
                 void* dst) const;

  // The dtype load_linear keeps the merged parts in.
  DType merged_linear_dtype(const std::vector<LinearPart>& parts, const std::vector<std::string>& names,
                            int64_t cols) const;
  // Dummy weights generated by the backend where they live (Backend::dummy_weight); nullopt when
  // the source reads values or the backend has no generator.
  std::optional<DeviceTensor> dummy_linear(const std::vector<LinearPart>& parts, const std::vector<std::string>& names,
                                           int64_t cols, DType dtype) const;

  const ModelConfig& cfg_;
  const WeightSource& weights_;
  Backend& backend_;
  const ModelBuildOptions& opt_;
};

}  // namespace cypris
