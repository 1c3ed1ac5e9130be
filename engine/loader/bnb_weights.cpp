#include "engine/loader/bnb_weights.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/common/error.h"
#include "engine/common/json_depth.h"
#include "engine/common/log.h"
#include "engine/loader/dequant_rows.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weight_names.h"
#include "kernels/common/bnb_blocks.h"
#include "kernels/common/wq_blocks.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

using json = nlohmann::json;

// One 4-bit layer: its packed codes over the flattened [out, in] weight and the fp32 absmax of each
// block of `blocksize` elements (nested absmax already dequantized).
struct B4Layer {
  const uint8_t* packed = nullptr;
  int64_t out = 0, in = 0, blocksize = 64;
  bool nf4 = true;
  std::vector<float> absmax;
  // bitsandbytes' order: element 2i in the high nibble of byte i, 2i + 1 in the low one.
  int code(int64_t e) const { return (e & 1) ? packed[e / 2] & 0xF : packed[e / 2] >> 4; }
  float value(int64_t e) const {
    const float* table = nf4 ? quant::kNf4Table : quant::kFp4Table;
    return table[code(e)] * absmax[static_cast<size_t>(e / blocksize)];
  }
};

class BnbWeightSource : public WeightSource {
 public:
  BnbWeightSource(const std::filesystem::path& dir, const QuantConfig& q, std::unique_ptr<WeightSource> plain)
      : dir_(dir), q_(q), plain_(std::move(plain)), ckpt_(dir) {}

  std::string describe() const override { return plain_->describe(); }
  bool contains(const std::string& name) const override {
    return is_b4(name) || is_i8(name) || plain_->contains(name);
  }

  std::optional<std::vector<int64_t>> stored_shape(const std::string& name) const override {
    if (!is_b4(name)) return plain_->stored_shape(name);
    const json st = state(name);
    const json& s = st.at("shape");
    return std::vector<int64_t>{s[0].get<int64_t>(), s[1].get<int64_t>()};
  }

  std::optional<DType> native_dtype(const std::string& name) const override {
    if (is_i8(name)) return i8_block_type(name);
    if (!is_b4(name)) return plain_->native_dtype(name);
    const json st = state(name);
    // A 64-value run of a row must lie in one bitsandbytes block: the block size a multiple of 64,
    // the rows a multiple of 64 long. Other layers are dequantized to --dtype.
    if (st.at("blocksize").get<int64_t>() % quant::kB4Block != 0 || st.at("shape")[1].get<int64_t>() % quant::kB4Block != 0)
      return std::nullopt;
    return quant_type(name) == "nf4" ? DType::NF4G64 : DType::FP4G64;
  }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    if (is_i8(name)) return read_i8(name, full_shape, dtype, shard, dst);
    if (!is_b4(name)) return plain_->read_into(name, full_shape, dtype, shard, dst);
    CYPRIS_CHECK(full_shape.size() == 2, "{}: bitsandbytes layer '{}' read with shape {}; it is a matrix",
                 dir_.string(), name, shape_str(full_shape));
    const B4Layer l = open_layer(name, full_shape[0], full_shape[1]);
    const std::vector<int64_t> local = shard_shape(name, full_shape, shard);
    int64_t n0 = 0, k0 = 0;
    if (shard.dim == 0) n0 = shard.rank * local[0];
    if (shard.dim == 1) k0 = shard.rank * local[1];
    const int64_t rows = local[0], cols = local[1];
    const size_t row_bytes = dtype_nbytes(dtype, cols);
    auto* out = static_cast<char*>(dst);
    if (dtype == DType::NF4G64 || dtype == DType::FP4G64) {
      CYPRIS_CHECK(native_dtype(name) == dtype && k0 % quant::kB4Block == 0 && cols % quant::kB4Block == 0,
                   "{}: bitsandbytes layer '{}' [{}, {}] (blocksize {}) cannot be read as {} columns {}..{} (whole "
                   "64-value blocks only)",
                   dir_.string(), name, l.out, l.in, l.blocksize, dtype_name(dtype), k0, k0 + cols);
      shared_thread_pool().parallel_for(
          rows,
          [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              auto* blocks = reinterpret_cast<quant::BlockB4*>(out + static_cast<size_t>(r) * row_bytes);
              for (int64_t b = 0; b < cols / quant::kB4Block; ++b) {
                const int64_t e0 = (n0 + r) * l.in + k0 + b * quant::kB4Block;
                blocks[b].d = l.absmax[static_cast<size_t>(e0 / l.blocksize)];
                for (int j = 0; j < quant::kB4Block / 2; ++j) {
                  blocks[b].qs[j] = static_cast<uint8_t>(l.code(e0 + j) | (l.code(e0 + 32 + j) << 4));
                }
              }
            }
          },
          16);
      return;
    }
    CYPRIS_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
                 "{}: bitsandbytes layer '{}' cannot be read as {}", dir_.string(), name, dtype_name(dtype));
    write_dequantized_rows(dtype, dst, rows, cols, [&](int64_t r, float* row) {
      for (int64_t c = 0; c < cols; ++c) row[c] = l.value((n0 + r) * l.in + k0 + c);
    });
  }

 private:
  // The quant_state tensor of a 4-bit layer, or null.
  const SafetensorsTensor* state_tensor(const std::string& name, std::string* type = nullptr) const {
    for (const char* t : {"nf4", "fp4"}) {
      if (const SafetensorsTensor* s = ckpt_.find(name + ".quant_state.bitsandbytes__" + t)) {
        if (type) *type = t;
        return s;
      }
    }
    return nullptr;
  }

  bool is_b4(const std::string& name) const { return !layer_prefix(name).empty() && state_tensor(name) != nullptr; }

  // An LLM.int8 layer: `weight` I8 [out, in] beside `SCB` (fp32 absmax per row).
  bool is_i8(const std::string& name) const {
    return q_.bits == 8 && !layer_prefix(name).empty() && ckpt_.find(layer_prefix(name) + ".SCB") != nullptr;
  }

  // bitsandbytes' 1 / 127 in fp32 (int8_vectorwise_dequant's constant).
  static constexpr float kInv127 = static_cast<float>(7.874015718698502e-3);

  // The W8 block scale of a row: SCB / 127 as bitsandbytes computes it (fp32(SCB * fp32(1 / 127))),
  // rounded to the blocks' fp16.
  static uint16_t i8_block_scale(float scb) { return f32_to_f16(scb * kInv127); }

  // An int8 layer is kept in W8 blocks (W8G128, or W8G32 for rows that are not whole 128s) when its
  // rows are whole blocks and every row's scale is 0 or normal in fp16 (SCB from 127 * 2^-14 = 0.0078
  // to 127 * 65504): then the fp16 scale is within 2^-11 of SCB / 127 and each weight within
  // 2^-11 * SCB of bitsandbytes' value (docs/quantization.md). Other layers are dequantized.
  std::optional<DType> i8_block_type(const std::string& name) const {
    const SafetensorsTensor* w = ckpt_.find(name);
    const SafetensorsTensor* scb = ckpt_.find(layer_prefix(name) + ".SCB");
    if (w == nullptr || w->shape.size() != 2 || scb->dtype_name != "F32" ||
        scb->nbytes != static_cast<size_t>(w->shape[0]) * 4)
      return std::nullopt;  // read_i8 names what is wrong
    const int64_t in = w->shape[1];
    if (in % 32 != 0) return std::nullopt;
    for (int64_t r = 0; r < w->shape[0]; ++r) {
      float s;
      std::memcpy(&s, scb->data + 4 * r, 4);
      const float d = std::abs(f16_to_f32(i8_block_scale(s)));
      if (!(d == 0.0f || (d >= 0x1p-14f && std::isfinite(d)))) return std::nullopt;
    }
    return in % 128 == 0 ? DType::W8G128 : DType::W8G32;
  }

  // int8 rows dequantized as bitsandbytes does (int8_vectorwise_dequant): fp32(q * SCB) * fp32(1 / 127),
  // each product rounded in fp32; or as W8 blocks: the int8 values as they are, zero point 0, the
  // row's scale SCB / 127 in fp16 (i8_block_type).
  void read_i8(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
               void* dst) const {
    CYPRIS_CHECK(full_shape.size() == 2, "{}: bitsandbytes int8 layer '{}' read with shape {}; it is a matrix",
                 dir_.string(), name, shape_str(full_shape));
    const bool w8 = dtype == DType::W8G128 || dtype == DType::W8G32;
    CYPRIS_CHECK(w8 || dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
                 "{}: bitsandbytes int8 layer '{}' cannot be read as {}", dir_.string(), name, dtype_name(dtype));
    const int64_t out = full_shape[0], in = full_shape[1];
    const std::string p = layer_prefix(name);
    const SafetensorsTensor& w = need(name, "I8", {out, in}, "LLM.int8 weights, row-major");
    const SafetensorsTensor* scb = ckpt_.find(p + ".SCB");
    CYPRIS_CHECK(scb->dtype_name == "F32" && (scb->shape == std::vector<int64_t>{out} ||
                                              scb->shape == std::vector<int64_t>{out, 1}),
                 "{}: tensor '{}.SCB' is {} {} but must be F32 [{}] (one absmax per output row)", file_of(p + ".SCB"),
                 p, scb->dtype_name, shape_str(scb->shape), out);
    if (const SafetensorsTensor* f = ckpt_.find(p + ".weight_format")) {
      CYPRIS_CHECK(f->dtype_name == "U8" && f->nbytes == 1 && f->data[0] == 0,
                   "{}: tensor '{}.weight_format' must be U8 0 (row-major); bitsandbytes' col32 / col_turing / "
                   "col_ampere layouts (1, 2, 3) are not supported yet",
                   file_of(p + ".weight_format"), p);
    }
    std::vector<float> s(static_cast<size_t>(out));
    std::memcpy(s.data(), scb->data, s.size() * 4);
    for (int64_t r = 0; r < out; ++r) {
      CYPRIS_CHECK(std::isfinite(s[static_cast<size_t>(r)]), "{}: tensor '{}.SCB'[{}] = {}: it must be finite",
                   file_of(p + ".SCB"), p, r, s[static_cast<size_t>(r)]);
    }
    const std::vector<int64_t> local = shard_shape(name, full_shape, shard);
    const int64_t n0 = shard.dim == 0 ? shard.rank * local[0] : 0, k0 = shard.dim == 1 ? shard.rank * local[1] : 0;
    const int64_t rows = local[0], cols = local[1];
    const auto* q = reinterpret_cast<const int8_t*>(w.data);
    if (w8) {
      const int64_t block = dtype_block(dtype).elems;
      CYPRIS_CHECK(i8_block_type(name) == dtype && k0 % block == 0 && cols % block == 0,
                   "{}: bitsandbytes int8 layer '{}' [{}, {}] cannot be read as {} columns {}..{} (whole {}-value "
                   "blocks of rows whose scale SCB / 127 is normal in fp16 only)",
                   dir_.string(), name, out, in, dtype_name(dtype), k0, k0 + cols, block);
      const size_t row_bytes = dtype_nbytes(dtype, cols), block_bytes = dtype_block(dtype).bytes;
      auto* dst_bytes = static_cast<char*>(dst);
      shared_thread_pool().parallel_for(
          rows,
          [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              const uint16_t d = i8_block_scale(s[static_cast<size_t>(n0 + r)]);
              for (int64_t b = 0; b < cols / block; ++b) {
                char* blk = dst_bytes + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(b) * block_bytes;
                const int8_t* src = q + (n0 + r) * in + k0 + b * block;
                // W8 blocks hold q - 128 and z - 128: the stored int8 and 0 give d * q.
                if (block == 128) {
                  auto* o = reinterpret_cast<quant::BlockW8<128>*>(blk);
                  o->d = d, o->z = 0;
                  std::memcpy(o->qs, src, 128);
                } else {
                  auto* o = reinterpret_cast<quant::BlockW8<32>*>(blk);
                  o->d = d, o->z = 0;
                  std::memcpy(o->qs, src, 32);
                }
              }
            }
          },
          16);
      return;
    }
    write_dequantized_rows(dtype, dst, rows, cols, [&](int64_t r, float* row) {
      const float sr = s[static_cast<size_t>(n0 + r)];
      for (int64_t c = 0; c < cols; ++c) {
        const volatile float prod = static_cast<float>(q[(n0 + r) * in + k0 + c]) * sr;
        row[c] = prod * kInv127;
      }
    });
  }

  std::string quant_type(const std::string& name) const {
    std::string t;
    state_tensor(name, &t);
    return t;
  }

  std::string file_of(const std::string& tensor) const {
    const SafetensorsFile* f = nullptr;
    ckpt_.find(tensor, &f);
    return f ? f->path().string() : dir_.string();
  }

  // The layer's quant_state JSON, checked: quant_type (the tensor's suffix and the config's),
  // blocksize, shape [out, in], and the nested fields when the absmax is nested.
  json state(const std::string& name) const {
    std::string type;
    const SafetensorsTensor* t = state_tensor(name, &type);
    const std::string sname = name + ".quant_state.bitsandbytes__" + type;
    const std::string where = fmt::format("{}: tensor '{}'", file_of(sname), sname);
    CYPRIS_CHECK(t->dtype_name == "U8" && t->shape.size() == 1,
                 "{} is {} {} but must be U8 [bytes] (the JSON text of the quant state)", where, t->dtype_name,
                 shape_str(t->shape));
    const std::string text(reinterpret_cast<const char*>(t->data), t->nbytes);
    CYPRIS_CHECK(json_nesting(text) <= 4, "{}: the quant state JSON nests too deeply", where);
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      CYPRIS_FAIL("{}: the quant state is not valid JSON ({})", where, e.what());
    }
    CYPRIS_CHECK(j.is_object(), "{}: the quant state must be a JSON object", where);
    const json qt = j.value("quant_type", json());
    CYPRIS_CHECK(qt.is_string() && qt.get<std::string>() == type,
                 "{}: quant_type {} does not match the tensor's name (bitsandbytes__{}); allowed: nf4, fp4", where,
                 qt.dump(), type);
    CYPRIS_CHECK(type == q_.checkpoint_format,
                 "{}: the layer is {} but quantization_config.bnb_4bit_quant_type is {} ({})", where, type,
                 q_.checkpoint_format, q_.source);
    const json bs = j.value("blocksize", json());
    CYPRIS_CHECK(bs.is_number_integer() && bs.get<int64_t>() > 0 && bs.get<int64_t>() <= (1 << 20),
                 "{}: blocksize {} must be a positive integer (bitsandbytes: 64 by default)", where, bs.dump());
    const json sh = j.value("shape", json());
    CYPRIS_CHECK(sh.is_array() && sh.size() == 2 && sh[0].is_number_integer() && sh[1].is_number_integer() &&
                     sh[0].get<int64_t>() > 0 && sh[1].get<int64_t>() > 0,
                 "{}: shape {} must be [out, in], two positive integers", where, sh.dump());
    const bool nested = j.contains("nested_offset") || ckpt_.find(name + ".nested_absmax") != nullptr;
    if (nested) {
      const json nbs = j.value("nested_blocksize", json());
      CYPRIS_CHECK(nbs.is_number_integer() && nbs.get<int64_t>() > 0 && nbs.get<int64_t>() <= (1 << 20),
                   "{}: nested_blocksize {} must be a positive integer (bitsandbytes: 256)", where, nbs.dump());
      const json off = j.value("nested_offset", json());
      CYPRIS_CHECK(off.is_number() && std::isfinite(off.get<double>()),
                   "{}: nested_offset {} must be a finite number (the mean absmax)", where, off.dump());
    }
    CYPRIS_CHECK(nested == q_.double_quant,
                 "{}: the layer's absmax is {} but quantization_config.bnb_4bit_use_double_quant is {} ({})", where,
                 nested ? "nested (double-quantized)" : "not nested", q_.double_quant, q_.source);
    return j;
  }

  // A tensor of the layer, checked for dtype and shape: an error naming the file, the tensor and
  // the expected dtype and shape.
  const SafetensorsTensor& need(const std::string& tname, const char* dtype, const std::vector<int64_t>& shape,
                                const std::string& why) const {
    const SafetensorsTensor* t = ckpt_.find(tname);
    CYPRIS_CHECK(t != nullptr, "{}: tensor '{}' not found; a bitsandbytes layer needs it ({} {}, {})", dir_.string(),
                 tname, dtype, shape_str(shape), why);
    CYPRIS_CHECK(t->dtype_name == dtype && t->shape == shape,
                 "{}: tensor '{}' is {} {} but must be {} {} ({})", file_of(tname), tname, t->dtype_name,
                 shape_str(t->shape), dtype, shape_str(shape), why);
    return *t;
  }

  B4Layer open_layer(const std::string& name, int64_t out, int64_t in) const {
    const json st = state(name);
    const std::vector<int64_t> want = {out, in};
    const std::vector<int64_t> have = {st.at("shape")[0].get<int64_t>(), st.at("shape")[1].get<int64_t>()};
    CYPRIS_CHECK(have == want, "{}: tensor '{}.quant_state.bitsandbytes__{}' says shape {} but the config needs {}",
                 file_of(name), name, quant_type(name), shape_str(have), shape_str(want));
    B4Layer l;
    l.out = out;
    l.in = in;
    l.nf4 = quant_type(name) == "nf4";
    l.blocksize = st.at("blocksize").get<int64_t>();
    const int64_t n = out * in, nblocks = (n + l.blocksize - 1) / l.blocksize;
    // bitsandbytes stores the packed codes as [(n + 1) / 2, 1]; a flat [(n + 1) / 2] is accepted too.
    const SafetensorsTensor* w = ckpt_.find(name);
    const int64_t nbytes = (n + 1) / 2;
    CYPRIS_CHECK(w != nullptr && w->dtype_name == "U8" &&
                     (w->shape == std::vector<int64_t>{nbytes, 1} || w->shape == std::vector<int64_t>{nbytes}),
                 "{}: tensor '{}' is {} {} but a bitsandbytes 4-bit [{}, {}] layer needs U8 {} (two codes per byte)",
                 file_of(name), name, w ? w->dtype_name : "missing", w ? shape_str(w->shape) : "", out, in,
                 shape_str({nbytes, 1}));
    l.packed = w->data;
    const SafetensorsTensor& qm = need(name + ".quant_map", "F32", {16}, "the 16-value code table");
    const float* table = l.nf4 ? quant::kNf4Table : quant::kFp4Table;
    for (int i = 0; i < 16; ++i) {
      float v;
      std::memcpy(&v, qm.data + 4 * i, 4);
      CYPRIS_CHECK(std::memcmp(&v, &table[i], 4) == 0,
                   "{}: tensor '{}.quant_map'[{}] = {} but bitsandbytes' {} table has {} there (other tables: not "
                   "supported)",
                   file_of(name + ".quant_map"), name, i, v, l.nf4 ? "nf4" : "fp4", table[i]);
    }
    l.absmax.resize(static_cast<size_t>(nblocks));
    const std::string aname = name + ".absmax";
    if (!q_.double_quant) {
      const SafetensorsTensor& a = need(aname, "F32", {nblocks}, fmt::format("one per block of {}", l.blocksize));
      std::memcpy(l.absmax.data(), a.data, static_cast<size_t>(nblocks) * 4);
    } else {
      const int64_t nbs = st.at("nested_blocksize").get<int64_t>(), n2 = (nblocks + nbs - 1) / nbs;
      const SafetensorsTensor& a =
          need(aname, "U8", {nblocks}, fmt::format("the nested codes of one absmax per block of {}", l.blocksize));
      const SafetensorsTensor& na = need(name + ".nested_absmax", "F32", {n2},
                                         fmt::format("one per {} absmax values", nbs));
      const SafetensorsTensor& nq = need(name + ".nested_quant_map", "F32", {256}, "the 8-bit code table");
      const auto offset = static_cast<float>(st.at("nested_offset").get<double>());
      std::vector<float> nabs(static_cast<size_t>(n2)), nmap(256);
      std::memcpy(nabs.data(), na.data, nabs.size() * 4);
      std::memcpy(nmap.data(), nq.data, nmap.size() * 4);
      // bitsandbytes: dequantize_blockwise (code[q] * absmax2, fp32), then += offset (fp32).
      for (int64_t i = 0; i < nblocks; ++i) {
        const volatile float prod = nmap[a.data[i]] * nabs[static_cast<size_t>(i / nbs)];
        l.absmax[static_cast<size_t>(i)] = prod + offset;
      }
    }
    for (int64_t i = 0; i < nblocks; ++i) {
      CYPRIS_CHECK(std::isfinite(l.absmax[static_cast<size_t>(i)]),
                   "{}: tensor '{}' gives block {} an absmax of {}; it must be finite", file_of(aname), aname, i,
                   l.absmax[static_cast<size_t>(i)]);
    }
    return l;
  }

  std::filesystem::path dir_;
  QuantConfig q_;
  std::unique_ptr<WeightSource> plain_;
  SafetensorsCheckpoint ckpt_;
};

}  // namespace

std::unique_ptr<WeightSource> make_bnb_weight_source(const std::filesystem::path& dir, const QuantConfig& q,
                                                     std::unique_ptr<WeightSource> plain) {
  if (q.bits == 8) {
    LOG_INFO("{}: bitsandbytes int8 (LLM.int8) layers are kept in 8 bits (W8 blocks, the row scale SCB / 127 in "
             "fp16); their activations are quantized to 8 bits per block of 128 (or 32) values, so outliers only "
             "coarsen their own block: llm_int8_threshold (the mixed fp16 decomposition) is not used",
             dir.string());
  }
  return std::make_unique<BnbWeightSource>(dir, q, std::move(plain));
}

}  // namespace cypris
