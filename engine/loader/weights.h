// Where a model's weights come from: a safetensors checkpoint or seeded random ("dummy") values,
// requested tensor by tensor with a shard spec so that a tensor-parallel rank reads only its
// slice. Also the load options (--dtype, --load-format, --seed) and the dtype rules.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/dtype.h"
#include "engine/common/tensor.h"
#include "engine/loader/model_config.h"
#include "kernels/common/dummy_fill.h"

namespace cypris {

// Which slice of a tensor a rank loads: dim < 0 replicates; else dim is split into world_size
// equal parts and the rank gets part `rank`.
struct ShardSpec {
  int rank = 0;
  int world_size = 1;
  int dim = -1;

  static ShardSpec replicated() { return {}; }
  static ShardSpec split(int dim, int rank, int world_size) { return {rank, world_size, dim}; }
};

// The shape of a rank's slice. Throws Error when the split dimension does not divide evenly.
std::vector<int64_t> shard_shape(const std::string& name, const std::vector<int64_t>& full_shape,
                                 const ShardSpec& shard);

// A loaded tensor in host memory.
struct HostTensor {
  Buffer buffer;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  Tensor view() const { return Tensor(buffer.data(), dtype, shape); }
};

// One product of a linear layer kept quantized over reordered input columns (act-order GPTQ, EXL2:
// the checkpoint's groups made contiguous, so that the block types apply): a [local rows,
// columns.size()] weight in `dtype` whose column j multiplies the shard's input column columns[j]
// (an index into the shard's inputs). The layer's output is the sum of its segments' products.
struct ColumnSegment {
  DType dtype = DType::F32;
  std::vector<int32_t> columns;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::string describe() const = 0;
  virtual bool contains(const std::string& name) const = 0;
  // The type the tensor is stored in when it is block-quantized (Q4_K, ...): a model may then ask
  // read_into for that DType and keep the weight quantized. nullopt for plain tensors and sources
  // that have none.
  virtual std::optional<DType> native_dtype(const std::string& name) const { return std::nullopt; }
  // The shape `name` is stored with, when the source has it (checkpoints); nullopt otherwise.
  virtual std::optional<std::vector<int64_t>> stored_shape(const std::string& name) const { return std::nullopt; }
  // Writes this rank's slice of `name` (whose full shape must equal full_shape) converted to dtype
  // into dst. Throws Error naming the file and tensor when it is missing or does not match.
  virtual void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype,
                         const ShardSpec& shard, void* dst) const = 0;
  // A generated source (dummy weights) says how `name`'s values are made, so that a backend can
  // make them where the weight lives (Backend::dummy_weight) instead of receiving host values: the
  // key and scale of the tensor (the run fields are left 0). nullopt when the values are read
  // from a file, or are constant (norm weights).
  virtual std::optional<DummyFill> dummy_fill(const std::string& name, const std::vector<int64_t>& full_shape) const {
    return std::nullopt;
  }

  // A layer kept quantized over reordered input columns: this shard's segments (ColumnSegment).
  // Empty (the default) when the layer is read whole by read_into: a plain or block-quantized
  // tensor, or a reordered layer whose shard does not cut into whole blocks (then it is read
  // dequantized in a plain dtype).
  virtual std::vector<ColumnSegment> column_segments(const std::string& name, const std::vector<int64_t>& full_shape,
                                                     const ShardSpec& shard) const {
    return {};
  }
  // Writes segment `index` of column_segments(name, full_shape, shard) as its dtype into dst.
  virtual void read_segment(const std::string& name, const std::vector<int64_t>& full_shape, const ShardSpec& shard,
                            size_t index, void* dst) const;

  HostTensor load(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype,
                  const ShardSpec& shard = {}) const;
};

struct LoadOptions {
  std::string dtype = "auto";        // auto, half/float16, bfloat16, float/float32
  std::string load_format = "auto";  // auto, safetensors, pt, gguf, dummy ('npcache': not supported yet)
  uint64_t seed = 0;                 // for dummy weights
  std::optional<std::string> quantization;  // -q / --quantization: must agree with the checkpoint's (fp8 on a
                                            // 16-bit checkpoint: quantized at load, engine/loader/online_quant.h)
  bool load_in_8bit = false;  // --load-in-8bit: 16-bit linear layers quantized at load to int8 per channel
  bool load_in_4bit = false;  // --load-in-4bit: 16-bit linear layers quantized at load to 4 bits per group
  ConfigOverrides overrides;         // --rope-scaling, --rope-theta, --max-model-len
  std::vector<std::string> ignore_patterns;  // --ignore-patterns: checkpoint files not to read
};

// --dtype: "auto" gives FP16 for FP32/FP16 models and BF16 for BF16 models (Aphrodite's rule).
// Throws Error for an unknown name.
DType resolve_dtype(const std::string& requested, const std::string& torch_dtype);

// Opens the weights of a model folder (or a .gguf file) according to options.load_format; a GPTQ or
// AWQ checkpoint (quantization_config, engine/loader/quant_config.h) keeps its layers quantized.
// families: for a GGUF file, its architecture's tensor names (model_family.h).
std::unique_ptr<WeightSource> open_weight_source(const ModelFamilies& families, const std::filesystem::path& dir,
                                                 const ModelConfig& cfg, const LoadOptions& options);

// Seeded random weights of any requested shape (norm weights are 1). Same seed, same values,
// whatever the sharding.
std::unique_ptr<WeightSource> make_dummy_weight_source(uint64_t seed);

// Copies count elements of a plain type (F32/F16/BF16) from src to dst in dst_dtype, converting
// through fp32 in bounded chunks (no allocation). The weight sources' common read step.
void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t count);

}  // namespace cypris
