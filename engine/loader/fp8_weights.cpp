#include "engine/loader/fp8_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/loader/dequant_rows.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weight_names.h"
#include "kernels/common/fp8.h"
#include "kernels/common/fp8_blocks.h"
#include "kernels/common/wq_blocks.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant/fp8_gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

// One FP8 (or int8) layer: its codes [out, in] and scales as fp32, scale(r, c) = scales[(r / sn) *
// cols + c / sk]; int8 layers may have zero points laid out as the scales.
struct Fp8Layer {
  const uint8_t* q = nullptr;
  int64_t out = 0, in = 0;
  bool int8 = false;
  std::vector<float> scales;
  std::vector<int32_t> zeros;  // int8 asymmetric only
  int64_t sn = 1, sk = 1, cols = 1;
  size_t at(int64_t r, int64_t c) const { return static_cast<size_t>((r / sn) * cols + c / sk); }
  float scale(int64_t r, int64_t c) const { return scales[at(r, c)]; }
  int32_t zero(int64_t r, int64_t c) const { return zeros.empty() ? 0 : zeros[at(r, c)]; }
  // The dequantized value: e4m3 * scale, or scale * (q - zero) for int8 (one fp32 product each).
  float value(int64_t r, int64_t c) const {
    const uint8_t v = q[r * in + c];
    if (!int8) return fp8_e4m3_to_f32(v) * scale(r, c);
    return static_cast<float>(static_cast<int8_t>(v) - zero(r, c)) * scale(r, c);
  }
};

class Fp8WeightSource : public WeightSource {
 public:
  Fp8WeightSource(const std::filesystem::path& dir, const QuantConfig& q, std::unique_ptr<WeightSource> plain)
      : dir_(dir), q_(q), plain_(std::move(plain)), ckpt_(dir) {}

  std::string describe() const override { return plain_->describe(); }
  bool contains(const std::string& name) const override { return is_fp8(name) || plain_->contains(name); }

  std::optional<DType> native_dtype(const std::string& name) const override {
    if (!is_fp8(name)) return plain_->native_dtype(name);
    const SafetensorsTensor* t = ckpt_.find(name);
    if (t->shape.size() != 2) return std::nullopt;
    if (is_int8()) {  // W8 blocks with the row's (or tensor's) scale
      if (t->shape[1] % 128 == 0) return DType::W8G128;
      return t->shape[1] % 32 == 0 ? std::optional<DType>(DType::W8G32) : std::nullopt;
    }
    if (t->shape[1] % quant::kF8Block != 0) return std::nullopt;  // dequantized
    if (q_.scale_strategy == "block" && q_.block_k % quant::kF8Block != 0) return std::nullopt;
    return DType::F8G128;
  }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    if (!is_fp8(name)) return plain_->read_into(name, full_shape, dtype, shard, dst);
    CYPRIS_CHECK(full_shape.size() == 2, "{}: FP8 layer '{}' read with shape {}; it is a matrix", dir_.string(), name,
                 shape_str(full_shape));
    const Fp8Layer l = open_layer(name, full_shape[0], full_shape[1]);
    const std::vector<int64_t> local = shard_shape(name, full_shape, shard);
    int64_t n0 = 0, k0 = 0;
    if (shard.dim == 0) n0 = shard.rank * local[0];
    if (shard.dim == 1) k0 = shard.rank * local[1];
    const int64_t rows = local[0], cols = local[1];
    const int64_t row_bytes = static_cast<int64_t>(dtype_nbytes(dtype, cols));
    auto* out = static_cast<char*>(dst);
    if (dtype == DType::W8G128 || dtype == DType::W8G32) {
      write_w8(name, l, dtype, n0, k0, rows, cols, out);
      return;
    }
    if (dtype == DType::F8G128) {
      CYPRIS_CHECK(native_dtype(name) == DType::F8G128 && k0 % quant::kF8Block == 0 && cols % quant::kF8Block == 0,
                   "{}: FP8 layer '{}' [{}, {}] cannot be read as F8G128 columns {}..{} (whole 128-value blocks only)",
                   dir_.string(), name, l.out, l.in, k0, k0 + cols);
      shared_thread_pool().parallel_for(
          rows,
          [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              check_row(name, l, n0 + r, k0, cols);
              auto* blocks = reinterpret_cast<quant::BlockF8*>(out + r * row_bytes);
              for (int64_t b = 0; b < cols / quant::kF8Block; ++b) {
                const int64_t c = k0 + b * quant::kF8Block;
                blocks[b].d = l.scale(n0 + r, c);
                std::memcpy(blocks[b].qs, l.q + (n0 + r) * l.in + c, quant::kF8Block);
              }
            }
          },
          16);
      return;
    }
    CYPRIS_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
                 "{}: FP8 layer '{}' cannot be read as {}", dir_.string(), name, dtype_name(dtype));
    write_dequantized_rows(dtype, dst, rows, cols, [&](int64_t r, float* row) {
      check_row(name, l, n0 + r, k0, cols);
      for (int64_t c = 0; c < cols; ++c) row[c] = l.value(n0 + r, k0 + c);
    });
  }

 private:
  bool is_int8() const { return q_.checkpoint_format == "int-quantized"; }

  // An 8-bit layer of this checkpoint: F8_E4M3 (FP8) or I8 (int-quantized) weights.
  bool is_fp8(const std::string& name) const {
    if (layer_prefix(name).empty()) return false;
    const SafetensorsTensor* t = ckpt_.find(name);
    return t != nullptr && t->dtype_name == (is_int8() ? "I8" : "F8_E4M3");
  }

  // int8 rows as W8 blocks: the scale must be exact in the blocks' fp16 (bf16 and fp16 scales in
  // fp16's normal range are), so that d * (q - z) is the checkpoint's value.
  void write_w8(const std::string& name, const Fp8Layer& l, DType dtype, int64_t n0, int64_t k0, int64_t rows,
                int64_t cols, char* out) const {
    const int64_t block = dtype_block(dtype).elems;
    const size_t row_bytes = dtype_nbytes(dtype, cols);
    CYPRIS_CHECK(native_dtype(name) == dtype && k0 % block == 0 && cols % block == 0,
                 "{}: int8 layer '{}' [{}, {}] cannot be read as {} columns {}..{}", dir_.string(), name, l.out, l.in,
                 dtype_name(dtype), k0, k0 + cols);
    const std::string sname = layer_prefix(name) + ".weight_scale";
    for (size_t i = 0; i < l.scales.size(); ++i) {
      CYPRIS_CHECK(f16_to_f32(f32_to_f16(l.scales[i])) == l.scales[i],
                   "{}: tensor '{}'[{}] = {} is not exact in fp16; int8 layers with such scales are not supported "
                   "yet",
                   file_of(sname), sname, i, l.scales[i]);
      CYPRIS_CHECK(l.zeros.empty() || (l.zeros[i] >= -128 && l.zeros[i] <= 127),
                   "{}: tensor '{}.weight_zero_point'[{}] = {} is not an int8", file_of(sname), layer_prefix(name), i,
                   l.zeros[i]);
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / block; ++b) {
        const int64_t c = k0 + b * block;
        const uint16_t d = f32_to_f16(l.scale(n0 + r, c));
        const auto z = static_cast<int16_t>(l.zero(n0 + r, c));  // the zero point minus 128, as q
        const uint8_t* src = l.q + (n0 + r) * l.in + c;
        char* blk = out + r * row_bytes + static_cast<size_t>(b) * dtype_block(dtype).bytes;
        if (block == 128) {
          auto* w = reinterpret_cast<quant::BlockW8<128>*>(blk);
          w->d = d, w->z = z;
          std::memcpy(w->qs, src, 128);
        } else {
          auto* w = reinterpret_cast<quant::BlockW8<32>*>(blk);
          w->d = d, w->z = z;
          std::memcpy(w->qs, src, 32);
        }
      }
    }
  }

  // No quantizer writes e4m3's NaN codes (0x7f, 0xff); a file that has one is damaged.
  void check_row(const std::string& name, const Fp8Layer& l, int64_t r, int64_t c0, int64_t count) const {
    if (l.int8) return;  // every byte is an int8
    const uint8_t* q = l.q + r * l.in + c0;
    for (int64_t c = 0; c < count; ++c) {
      CYPRIS_CHECK((q[c] & 0x7f) != 0x7f, "{}: tensor '{}' holds a NaN (e4m3 code 0x{:02x}) at [{}, {}]", file_of(name),
                   name, q[c], r, c0 + c);
    }
  }

  std::string file_of(const std::string& tensor) const {
    const SafetensorsFile* f = nullptr;
    ckpt_.find(tensor, &f);
    return f ? f->path().string() : dir_.string();
  }

  // The layer's codes and scales, checked against the config and the [out, in] the model expects.
  Fp8Layer open_layer(const std::string& name, int64_t out, int64_t in) const {
    const std::string p = layer_prefix(name);
    const SafetensorsTensor* w = ckpt_.find(name);
    const std::vector<int64_t> want = {out, in};
    CYPRIS_CHECK(w->shape == want, "{}: tensor '{}' has shape {} but the config needs {}", file_of(name), name,
                 shape_str(w->shape), shape_str(want));
    Fp8Layer l;
    l.int8 = is_int8();
    l.q = w->data;
    l.out = out;
    l.in = in;
    const bool inv = q_.scale_strategy == "block" && q_.method == "fp8";
    const std::string sname = p + (inv ? ".weight_scale_inv" : ".weight_scale");
    const SafetensorsFile* f = nullptr;
    const SafetensorsTensor* s = ckpt_.find(sname, &f);
    CYPRIS_CHECK(s != nullptr, "{}: tensor '{}' not found; an FP8 layer needs it ({})", file_of(name), sname,
                 q_.summary());
    CYPRIS_CHECK(s->dtype.has_value(), "{}: tensor '{}' has dtype {}; scales must be F32, F16 or BF16",
                 f->path().string(), sname, s->dtype_name);
    // Which layout: the config's, or for quant_method fp8 without blocks the scale's own shape.
    std::string strategy = q_.scale_strategy;
    const int64_t numel = s->numel();
    if (strategy.empty()) strategy = numel == 1 ? "tensor" : "channel";
    std::vector<std::vector<int64_t>> allowed;
    if (strategy == "tensor") {
      allowed = {{}, {1}, {1, 1}};
      l.sn = out, l.sk = in, l.cols = 1;
    } else if (strategy == "channel") {
      allowed = {{out}, {out, 1}};
      l.sn = 1, l.sk = in, l.cols = 1;
    } else {
      const int64_t gr = (out + q_.block_n - 1) / q_.block_n, gc = (in + q_.block_k - 1) / q_.block_k;
      allowed = {{gr, gc}};
      l.sn = q_.block_n, l.sk = q_.block_k, l.cols = gc;
    }
    bool ok = false;
    for (const auto& a : allowed) ok = ok || s->shape == a;
    std::vector<std::string> names;
    for (const auto& a : allowed) names.push_back(shape_str(a));
    CYPRIS_CHECK(ok, "{}: tensor '{}' has shape {} but {} scales of a [{}, {}] layer need {}", f->path().string(),
                 sname, shape_str(s->shape), strategy, out, in, fmt::join(names, " or "));
    l.scales.resize(static_cast<size_t>(numel));
    convert_to_f32(s->data, *s->dtype, l.scales.data(), numel);
    for (size_t i = 0; i < l.scales.size(); ++i) {
      CYPRIS_CHECK(std::isfinite(l.scales[i]) && l.scales[i] > 0.0f,
                   "{}: tensor '{}'[{}] = {}: a scale must be positive and finite", f->path().string(), sname, i,
                   l.scales[i]);
    }
    if (l.int8 && !q_.sym) {  // zero points, laid out as the scales
      const std::string zname = p + ".weight_zero_point";
      const SafetensorsFile* zf = nullptr;
      const SafetensorsTensor* z = ckpt_.find(zname, &zf);
      CYPRIS_CHECK(z != nullptr, "{}: tensor '{}' not found; an asymmetric int8 layer needs it", file_of(name), zname);
      CYPRIS_CHECK((z->dtype_name == "I8" || z->dtype_name == "I32") && z->shape == s->shape,
                   "{}: tensor '{}' is {} {} but needs I8 (or I32) {}, the shape of its scales", zf->path().string(),
                   zname, z->dtype_name, shape_str(z->shape), shape_str(s->shape));
      l.zeros.resize(static_cast<size_t>(numel));
      for (int64_t i = 0; i < numel; ++i) {
        l.zeros[i] = z->dtype_name == "I8" ? static_cast<int8_t>(z->data[i])
                                           : reinterpret_cast<const int32_t*>(z->data)[i];
      }
    }
    return l;
  }

  std::filesystem::path dir_;
  QuantConfig q_;
  std::unique_ptr<WeightSource> plain_;
  SafetensorsCheckpoint ckpt_;
};

}  // namespace

std::unique_ptr<WeightSource> make_fp8_weight_source(const std::filesystem::path& dir, const QuantConfig& q,
                                                     std::unique_ptr<WeightSource> plain) {
  return std::make_unique<Fp8WeightSource>(dir, q, std::move(plain));
}

}  // namespace cypris
