#include "engine/loader/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/loader/exl2_weights.h"
#include "engine/loader/bnb_weights.h"
#include "engine/loader/fp8_weights.h"
#include "engine/loader/gguf_model.h"
#include "engine/loader/online_quant_weights.h"
#include "engine/loader/quant_config.h"
#include "engine/loader/quant_weights.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/torch_checkpoint.h"
#include "engine/loader/weight_names.h"
#include "kernels/cpu/dummy_fill.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

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

// Safetensors or PyTorch .bin tensors (both give SafetensorsTensor views of their mapping).
template <typename Checkpoint>
class CheckpointWeightSource : public WeightSource {
 public:
  CheckpointWeightSource(const std::filesystem::path& dir, const std::vector<std::string>& ignore_patterns)
      : dir_(dir), ckpt_(dir, ignore_patterns) {}

  std::string describe() const override { return dir_.string(); }
  bool contains(const std::string& name) const override { return ckpt_.find(name) != nullptr; }
  std::optional<std::vector<int64_t>> stored_shape(const std::string& name) const override {
    const SafetensorsTensor* t = ckpt_.find(name);
    if (t == nullptr) return std::nullopt;
    return t->shape;
  }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    const typename Checkpoint::File* file = nullptr;
    const SafetensorsTensor* t = ckpt_.find(name, &file);
    CYPRIS_CHECK(t != nullptr, "{}: tensor '{}' not found in the checkpoint", dir_.string(), name);
    CYPRIS_CHECK(t->dtype.has_value(), "{}: tensor '{}' has dtype {}; weights must be F32, F16 or BF16",
                 file->path().string(), name, t->dtype_name);
    CYPRIS_CHECK(t->shape == full_shape, "{}: tensor '{}' has shape {} but the config needs {}", file->path().string(),
                 name, shape_str(t->shape), shape_str(full_shape));
    shard_shape(name, full_shape, shard);  // validates the split
    const size_t src_es = dtype_size(*t->dtype);
    const size_t dst_es = dtype_size(dtype);
    // Copied on all cores: from the page cache a single thread is the bottleneck of loading (the
    // mapping's page faults and the copy); the bytes are the same.
    struct Run {
      int64_t src_off, dst_off, count;
    };
    std::vector<Run> pieces;
    constexpr int64_t kPiece = 1 << 20;  // elements per task of a long run
    for_each_slice_run(full_shape, shard, [&](int64_t src_off, int64_t dst_off, int64_t count) {
      for (int64_t i = 0; i < count; i += kPiece)
        pieces.push_back({src_off + i, dst_off + i, std::min(kPiece, count - i)});
    });
    shared_thread_pool().parallel_for(static_cast<int64_t>(pieces.size()), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const Run& r = pieces[static_cast<size_t>(p)];
        convert_elements(t->data + r.src_off * src_es, *t->dtype, static_cast<char*>(dst) + r.dst_off * dst_es, dtype,
                         r.count);
      }
    });
  }

 private:
  std::filesystem::path dir_;
  Checkpoint ckpt_;
};

bool is_norm_weight(const std::string& name) {
  return name.size() >= 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
}

// Values from kernels/common/dummy_fill.h, made by dummy_fill_cpu on all cores; a backend that
// generates weights itself (Backend::dummy_weight) makes the same values from dummy_fill().
class DummyWeightSource : public WeightSource {
 public:
  explicit DummyWeightSource(uint64_t seed) : seed_(seed) {}
  std::string describe() const override { return fmt::format("dummy weights (seed {})", seed_); }
  bool contains(const std::string&) const override { return true; }

  std::optional<DummyFill> dummy_fill(const std::string& name, const std::vector<int64_t>& full_shape) const override {
    if (is_norm_weight(name)) return std::nullopt;
    DummyFill f;
    f.key = dummy_key(seed_, name.data(), name.size());
    f.scale = dummy_scale(static_cast<int>(full_shape.size()), full_shape.empty() ? 1 : full_shape.back());
    return f;
  }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    const std::vector<int64_t> local = shard_shape(name, full_shape, shard);
    int64_t n = 1;
    for (int64_t d : local) n *= d;
    std::optional<DummyFill> f = dummy_fill(name, full_shape);
    if (!f) {  // norm weights are 1
      const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
      convert_from_f32(ones.data(), dtype, dst, n);
      return;
    }
    // The slice as one run: `outer` rows of this rank's part of the split dimension.
    if (shard.dim < 0 || shard.world_size == 1) {
      f->rows = 1;
      f->row_len = n;
      f->src_row_stride = n;
    } else {
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < shard.dim; ++i) outer *= full_shape[i];
      for (size_t i = shard.dim + 1; i < full_shape.size(); ++i) inner *= full_shape[i];
      const int64_t part = full_shape[shard.dim] / shard.world_size;
      f->rows = outer;
      f->row_len = part * inner;
      f->src_offset = shard.rank * part * inner;
      f->src_row_stride = full_shape[shard.dim] * inner;
    }
    dummy_fill_cpu(dst, dtype, *f);
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

void WeightSource::read_segment(const std::string& name, const std::vector<int64_t>& full_shape,
                                const ShardSpec& shard, size_t index, void* dst) const {
  CYPRIS_FAIL("{}: tensor '{}' has no column segments (it is read whole)", describe(), name);
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

std::unique_ptr<WeightSource> make_dummy_weight_source(uint64_t seed) {
  return std::make_unique<DummyWeightSource>(seed);
}

std::unique_ptr<WeightSource> open_weight_source(const ModelFamilies& families, const std::filesystem::path& dir,
                                                 const ModelConfig& cfg, const LoadOptions& options) {
  const std::string& f = options.load_format;
  if (f == "dummy") return make_dummy_weight_source(options.seed);
  if (is_gguf_path(dir)) {
    CYPRIS_CHECK(f == "auto" || f == "gguf", "--load-format {}: {} is a GGUF file (use auto or gguf)", f, dir.string());
    CYPRIS_CHECK(!options.quantization || *options.quantization == "gguf",
                 "--quantization {}: {} is a GGUF file (its quantization is gguf; leave -q out or pass -q gguf)",
                 *options.quantization, dir.string());
    CYPRIS_CHECK(!options.load_in_8bit && !options.load_in_4bit,
                 "{}: {} is a GGUF file, already quantized; it loads as it is, leave the flag out",
                 options.load_in_8bit ? "--load-in-8bit" : "--load-in-4bit", dir.string());
    return make_gguf_weight_source(families, std::make_shared<GgufModel>(dir));
  }
  CYPRIS_CHECK(f != "gguf", "--load-format gguf: {} is not a .gguf file; pass the file as --model (or --gguf-file NAME)",
               dir.string());
  if (f == "npcache") CYPRIS_FAIL("--load-format npcache: not supported yet; use pt, safetensors or dummy");
  CYPRIS_CHECK(f == "auto" || f == "safetensors" || f == "pt" || f == "bitsandbytes",
               "--load-format: '{}' is not a load format; allowed: auto, safetensors, pt, gguf, dummy, bitsandbytes "
               "(npcache: not supported yet)",
               f);
  // auto: safetensors when the folder has them, else PyTorch .bin files (vLLM's order).
  std::unique_ptr<WeightSource> plain;
  if (f == "pt" || (f == "auto" && !SafetensorsCheckpoint::present(dir) && TorchCheckpoint::present(dir))) {
    plain = std::make_unique<CheckpointWeightSource<TorchCheckpoint>>(dir, options.ignore_patterns);
  } else if (f == "auto" && !SafetensorsCheckpoint::present(dir)) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".bin" || e.path().extension() == ".pt" || e.path().extension() == ".pth") {
        CYPRIS_FAIL(
            "{}: only {} found; Cypris reads PyTorch checkpoints named pytorch_model*.bin (--load-format pt) "
            "and safetensors",
            dir.string(), e.path().filename().string());
      }
    }
  }
  if (!plain) plain = std::make_unique<CheckpointWeightSource<SafetensorsCheckpoint>>(dir, options.ignore_patterns);
  std::optional<QuantConfig> ckpt = read_quant_config(dir);
  if (!ckpt) ckpt = exl2_config_from_tensors(dir, options.ignore_patterns);  // EXL2 checkpoints without a quantization_config
  if (const auto online = online_quant_mode(options, ckpt ? ckpt->method : "", dir.string())) {
    LOG_INFO("{}: linear layers quantized at load: {}", dir.string(),
             *online == quant::OnlineQuant::Fp8    ? "fp8 e4m3, one scale per output channel (F8G128)"
             : *online == quant::OnlineQuant::Int8 ? "int8, one scale per output channel (W8G128 / W8G32)"
                                                   : "4-bit, one scale and zero point per 128 or 32 columns (W4G128 / W4G32)");
    return make_online_quant_source(std::move(plain), *online);
  }
  const std::optional<QuantConfig> q = resolve_quantization(ckpt, options.quantization, dir.string());
  CYPRIS_CHECK(f != "bitsandbytes" || (q && q->method == "bitsandbytes"),
               "--load-format bitsandbytes: {} is not a bitsandbytes checkpoint (its config.json has no "
               "quantization_config with quant_method bitsandbytes); use --load-format auto",
               dir.string());
  if (!q) return plain;
  LOG_INFO("{}: quantized checkpoint, {}{}", dir.string(), q->summary(),
           q->method == "exl2" ? " (linear layers kept at their bits in W4/W8 blocks, lm_head dequantized)"
                               : " (layers kept quantized)");
  if (q->method == "fp8" || q->checkpoint_format == "float-quantized" || q->checkpoint_format == "int-quantized") {
    return make_fp8_weight_source(dir, *q, std::move(plain));
  }
  if (q->method == "exl2") return make_exl2_weight_source(dir, *q, std::move(plain));
  if (q->method == "bitsandbytes") return make_bnb_weight_source(dir, *q, std::move(plain));
  return make_quantized_weight_source(dir, *q, std::move(plain));
}

}  // namespace cypris
