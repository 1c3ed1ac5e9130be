#include "engine/loader/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/common/error.h"
#include "engine/loader/gguf_model.h"
#include "engine/loader/safetensors.h"
#include "kernels/cpu/gemm.h"

namespace cypris {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// Copies count elements from src (src_dtype) to dst (dst_dtype), converting through fp32.
void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t count) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(src_dtype));
    return;
  }
  if (dst_dtype == DType::F32) {
    convert_to_f32(src, src_dtype, static_cast<float*>(dst), count);
    return;
  }
  if (src_dtype == DType::F32) {
    convert_from_f32(static_cast<const float*>(src), dst_dtype, dst, count);
    return;
  }
  constexpr int64_t kChunk = 4096;
  float tmp[kChunk];
  for (int64_t i = 0; i < count; i += kChunk) {
    const int64_t n = std::min(kChunk, count - i);
    convert_to_f32(static_cast<const char*>(src) + i * dtype_size(src_dtype), src_dtype, tmp, n);
    convert_from_f32(tmp, dst_dtype, static_cast<char*>(dst) + i * dtype_size(dst_dtype), n);
  }
}

// Calls fn(src_element_offset, dst_element_offset, count) for each contiguous run of the slice.
template <typename Fn>
void for_each_slice_run(const std::vector<int64_t>& full, const ShardSpec& shard, Fn fn) {
  if (shard.dim < 0 || shard.world_size == 1) {
    int64_t n = 1;
    for (int64_t d : full) n *= d;
    fn(0, 0, n);
    return;
  }
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < shard.dim; ++i) outer *= full[i];
  for (size_t i = shard.dim + 1; i < full.size(); ++i) inner *= full[i];
  const int64_t part = full[shard.dim] / shard.world_size;
  for (int64_t o = 0; o < outer; ++o) {
    fn((o * full[shard.dim] + shard.rank * part) * inner, o * part * inner, part * inner);
  }
}

class CheckpointWeightSource : public WeightSource {
 public:
  explicit CheckpointWeightSource(const std::filesystem::path& dir) : dir_(dir), ckpt_(dir) {}

  std::string describe() const override { return dir_.string(); }
  bool contains(const std::string& name) const override { return ckpt_.find(name) != nullptr; }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* t = ckpt_.find(name, &file);
    CYPRIS_CHECK(t != nullptr, "{}: tensor '{}' not found in the checkpoint", dir_.string(), name);
    CYPRIS_CHECK(t->dtype.has_value(), "{}: tensor '{}' has dtype {}; weights must be F32, F16 or BF16",
                 file->path().string(), name, t->dtype_name);
    CYPRIS_CHECK(t->shape == full_shape, "{}: tensor '{}' has shape {} but the config needs {}", file->path().string(),
                 name, shape_str(t->shape), shape_str(full_shape));
    shard_shape(name, full_shape, shard);  // validates the split
    const size_t src_es = dtype_size(*t->dtype);
    const size_t dst_es = dtype_size(dtype);
    for_each_slice_run(full_shape, shard, [&](int64_t src_off, int64_t dst_off, int64_t count) {
      convert_elements(t->data + src_off * src_es, *t->dtype, static_cast<char*>(dst) + dst_off * dst_es, dtype, count);
    });
  }

 private:
  std::filesystem::path dir_;
  SafetensorsCheckpoint ckpt_;
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class DummyWeightSource : public WeightSource {
 public:
  explicit DummyWeightSource(uint64_t seed) : seed_(seed) {}
  std::string describe() const override { return fmt::format("dummy weights (seed {})", seed_); }
  bool contains(const std::string&) const override { return true; }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    shard_shape(name, full_shape, shard);
    const bool is_norm = name.size() >= 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
    uint64_t h = seed_ * 0x100000001b3ull;
    for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    // Uniform in [-a, a] with a = 1/sqrt(fan_in) keeps activations O(1) through the layers.
    const int64_t fan_in = full_shape.empty() ? 1 : full_shape.back();
    const float a = full_shape.size() >= 2 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.02f;
    const size_t es = dtype_size(dtype);
    std::vector<float> tmp;
    for_each_slice_run(full_shape, shard, [&](int64_t src_off, int64_t dst_off, int64_t count) {
      tmp.resize(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        if (is_norm) {
          tmp[i] = 1.0f;
        } else {
          const uint64_t r = splitmix64(h ^ static_cast<uint64_t>(src_off + i));
          tmp[i] = a * (static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f);
        }
      }
      convert_from_f32(tmp.data(), dtype, static_cast<char*>(dst) + dst_off * es, count);
    });
  }

 private:
  uint64_t seed_;
};

}  // namespace

std::vector<int64_t> shard_shape(const std::string& name, const std::vector<int64_t>& full_shape,
                                 const ShardSpec& shard) {
  CYPRIS_CHECK(shard.world_size >= 1 && shard.rank >= 0 && shard.rank < shard.world_size,
               "tensor '{}': invalid shard rank {} of {}", name, shard.rank, shard.world_size);
  std::vector<int64_t> out = full_shape;
  if (shard.dim < 0 || shard.world_size == 1) return out;
  CYPRIS_CHECK(shard.dim < static_cast<int>(full_shape.size()), "tensor '{}': shard dim {} out of range for {}", name,
               shard.dim, shape_str(full_shape));
  CYPRIS_CHECK(full_shape[shard.dim] % shard.world_size == 0,
               "tensor '{}': dimension {} of size {} does not split evenly over {} ranks", name, shard.dim,
               full_shape[shard.dim], shard.world_size);
  out[shard.dim] /= shard.world_size;
  return out;
}

HostTensor WeightSource::load(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype,
                              const ShardSpec& shard) const {
  HostTensor t;
  t.dtype = dtype;
  t.shape = shard_shape(name, full_shape, shard);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  t.buffer = Buffer(dtype_nbytes(dtype, n));
  read_into(name, full_shape, dtype, shard, t.buffer.data());
  return t;
}

DType resolve_dtype(const std::string& requested, const std::string& torch_dtype) {
  if (requested == "auto") return torch_dtype == "bfloat16" ? DType::BF16 : DType::F16;
  if (requested == "half" || requested == "float16") return DType::F16;
  if (requested == "bfloat16") return DType::BF16;
  if (requested == "float" || requested == "float32") return DType::F32;
  CYPRIS_FAIL("--dtype: '{}' is not a dtype; allowed: auto, half, float16, bfloat16, float, float32", requested);
}

std::unique_ptr<WeightSource> make_dummy_weight_source(uint64_t seed) {
  return std::make_unique<DummyWeightSource>(seed);
}

std::unique_ptr<WeightSource> open_weight_source(const std::filesystem::path& dir, const ModelConfig& cfg,
                                                 const LoadOptions& options) {
  const std::string& f = options.load_format;
  if (f == "dummy") return make_dummy_weight_source(options.seed);
  if (is_gguf_path(dir)) {
    CYPRIS_CHECK(f == "auto" || f == "gguf", "--load-format {}: {} is a GGUF file (use auto or gguf)", f, dir.string());
    return make_gguf_weight_source(std::make_shared<GgufModel>(dir));
  }
  CYPRIS_CHECK(f != "gguf", "--load-format gguf: {} is not a .gguf file; pass the file as --model (or --gguf-file NAME)",
               dir.string());
  if (f == "pt" || f == "npcache") {
    CYPRIS_FAIL("--load-format {}: not supported yet; use safetensors (or dummy for random weights)", f);
  }
  CYPRIS_CHECK(f == "auto" || f == "safetensors",
               "--load-format: '{}' is not a load format; allowed: auto, safetensors, gguf, dummy (pt, npcache: not "
               "supported yet)",
               f);
  if (f == "auto" && !SafetensorsCheckpoint::present(dir)) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".bin" || e.path().extension() == ".pt") {
        CYPRIS_FAIL("{}: only PyTorch checkpoints ({}) found; they are not supported yet, use safetensors",
                    dir.string(), e.path().filename().string());
      }
    }
  }
  return std::make_unique<CheckpointWeightSource>(dir);
}

}  // namespace cypris
