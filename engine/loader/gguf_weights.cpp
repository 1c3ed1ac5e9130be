// The GGUF WeightSource: Hugging Face names -> GGUF names, shape checks, q/k row permutation undone,
// F32/F16/BF16 conversion, quantized blocks copied as they are (whole rows, or whole blocks of a
// row), and the name table.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "engine/common/error.h"
#include "engine/loader/gguf_model.h"
#include "engine/loader/weight_names.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant/quant_ref.h"

namespace cypris {
namespace {

// HF name pattern -> GGUF name pattern; "{}" is the layer number.
struct NameMap {
  std::string_view hf;
  std::string_view gguf;
};
constexpr NameMap kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
constexpr NameMap kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},  // Phi-3: fused [q | k | v]
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},      // Phi-3: fused [gate | up]
    {"mlp.gate.weight", "ffn_gate_inp.weight"},        // MoE router
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},  // Qwen2-MoE's shared expert
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};
// "<prefix><expert>.<suffix>" -> ffn_<kind>_exps.weight (merged) / ffn_<kind>.<expert>.weight (older).
struct ExpertMap {
  std::string_view prefix;
  std::string_view suffix;
  std::string_view kind;
};
constexpr ExpertMap kExpertNames[] = {
    {"mlp.experts.", "gate_proj.weight", "gate"},      {"mlp.experts.", "up_proj.weight", "up"},
    {"mlp.experts.", "down_proj.weight", "down"},      {"block_sparse_moe.experts.", "w1.weight", "gate"},
    {"block_sparse_moe.experts.", "w3.weight", "up"},  {"block_sparse_moe.experts.", "w2.weight", "down"},
};

// The leading decimal number of s (up to 6 digits) and its length; 0 length when none.
std::pair<int, size_t> leading_number(std::string_view s) {
  size_t digits = 0;
  while (digits < s.size() && digits < 7 && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0 || digits > 6) return {0, 0};
  return {std::stoi(std::string(s.substr(0, digits))), digits};
}

class GgufWeightSource : public WeightSource {
 public:
  GgufWeightSource(const ModelFamilies& families, std::shared_ptr<const GgufModel> model)
      : model_(std::move(model)), arch_(gguf_architecture(families, *model_)) {
    const std::string a(arch_.gguf_arch);
    heads_ = model_->get_int(a + ".attention.head_count").value_or(0);
    kv_heads_ = model_->get_int(a + ".attention.head_count_kv").value_or(heads_);
  }

  std::string describe() const override { return model_->describe(); }

  bool contains(const std::string& name) const override { return locate(name).info != nullptr; }

  std::optional<DType> native_dtype(const std::string& name) const override {
    const GgufTensorInfo* t = locate(name).info;
    if (!t) return std::nullopt;
    return dtype_of_ggml(t->type);
  }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    const Located l = locate(name);
    const GgufTensorInfo* t = l.info;
    CYPRIS_CHECK(t != nullptr, "{}: tensor '{}' (GGUF '{}') not found", describe(), name, l.gguf_name);
    const std::string where = l.expert >= 0 ? fmt::format("{}: tensor '{}' (expert {})", l.file->path().string(),
                                                          l.gguf_name, l.expert)
                                            : fmt::format("{}: tensor '{}'", l.file->path().string(), l.gguf_name);
    // One expert of a merged [experts, rows, cols] tensor is the [rows, cols] block at its index.
    std::vector<int64_t> shape = t->shape;
    size_t base_offset = 0;
    if (l.expert >= 0) {
      CYPRIS_CHECK(shape.size() == 3 && l.expert < shape[0], "{} has shape {}, which holds no expert {}", where,
                   shape_str(shape), l.expert);
      shape.erase(shape.begin());
      const auto src = dtype_of_ggml(t->type);
      CYPRIS_CHECK(src.has_value(), "{} has type {}, which Cypris cannot load", where, ggml_traits(t->type).name);
      base_offset = static_cast<size_t>(l.expert) * dtype_nbytes(*src, shape[0] * shape[1]);
    }
    // A one-row matrix may be stored as a vector (llama.cpp writes Qwen2-MoE's shared-expert gate
    // either way).
    if (shape.size() == 1 && full_shape.size() == 2 && full_shape[0] == 1 && full_shape[1] == shape[0]) {
      shape = full_shape;
    }
    CYPRIS_CHECK(shape == full_shape, "{} has shape {} but the model needs {}", where, shape_str(shape),
                 shape_str(full_shape));
    CYPRIS_CHECK(full_shape.size() <= 2, "{}: {}-dimensional tensors are not supported", where, full_shape.size());
    const auto src_dtype = dtype_of_ggml(t->type);
    CYPRIS_CHECK(src_dtype.has_value(), "{} has type {}, which Cypris cannot load", where, ggml_traits(t->type).name);
    shard_shape(name, full_shape, shard);  // validates the split
    const bool src_quant = dtype_is_quantized(*src_dtype);
    if (dtype_is_quantized(dtype)) {
      CYPRIS_CHECK(dtype == *src_dtype, "{} is {}; it cannot be read as {}", where, dtype_name(*src_dtype),
                   dtype_name(dtype));
    } else if (src_quant) {
      CYPRIS_CHECK(quant::supported(*src_dtype), "{} is {}, which cannot be dequantized", where,
                   dtype_name(*src_dtype));
    }

    // The tensor as [rows, cols] with the split on one of them. A 1-D tensor is one row, unless its
    // elements are permuted (q/k biases), when each element is a row.
    const std::string_view gn = l.gguf_name;
    const bool is_q = gn.ends_with("attn_q.weight") || gn.ends_with("attn_q.bias");
    const bool is_k = gn.ends_with("attn_k.weight") || gn.ends_with("attn_k.bias");
    const bool permute = arch_.permuted_qk && (is_q || is_k);
    const bool unfold_norm = arch_.gemma_norms && gn.ends_with("norm.weight");
    CYPRIS_CHECK(!unfold_norm || !src_quant, "{}: a quantized norm weight is not supported", where);
    int64_t rows = 1, cols = full_shape[0];
    int split = shard.dim < 0 || shard.world_size == 1 ? -1 : 1;
    if (full_shape.size() == 2) {
      rows = full_shape[0];
      cols = full_shape[1];
      split = split < 0 ? -1 : shard.dim;
    } else if (permute) {
      rows = full_shape[0];
      cols = 1;
      split = split < 0 ? -1 : 0;
    }
    int64_t row_begin = 0, row_count = rows, col_begin = 0, col_count = cols;
    if (split == 0) {
      row_count = rows / shard.world_size;
      row_begin = row_count * shard.rank;
    } else if (split == 1) {
      col_count = cols / shard.world_size;
      col_begin = col_count * shard.rank;
    }
    const DTypeBlock sb = dtype_block(*src_dtype);
    if (src_quant && split == 1) {
      CYPRIS_CHECK(col_begin % sb.elems == 0 && col_count % sb.elems == 0,
                   "{}: splitting its rows of {} over {} ranks gives {} elements, not a whole number of {} blocks "
                   "({} elements each); use a tensor parallel size that divides the row into whole blocks",
                   where, cols, shard.world_size, col_count, dtype_name(*src_dtype), sb.elems);
    }
    int64_t head_dim = 0;
    if (permute) {
      const int64_t heads = is_q ? heads_ : kv_heads_;
      CYPRIS_CHECK(heads > 0 && rows % heads == 0 && (rows / heads) % 2 == 0,
                   "{}: {} rows do not split into {} heads of an even size", where, rows, heads);
      head_dim = rows / heads;
    }
    const size_t src_row_bytes = dtype_nbytes(*src_dtype, cols);
    const size_t src_col_off = dtype_nbytes(*src_dtype, col_begin);
    const size_t dst_row_bytes = dtype_nbytes(dtype, col_count);
    std::vector<float> tmp;
    for (int64_t r = 0; r < row_count; ++r) {
      int64_t src_row = row_begin + r;
      if (permute) {
        // HF row h*D + s*D/2 + i is llama.cpp's row h*D + 2i + s.
        const int64_t h = src_row / head_dim, within = src_row % head_dim, half = head_dim / 2;
        src_row = h * head_dim + 2 * (within % half) + within / half;
      }
      const uint8_t* s = t->data + base_offset + static_cast<size_t>(src_row) * src_row_bytes + src_col_off;
      uint8_t* d = static_cast<uint8_t*>(dst) + static_cast<size_t>(r) * dst_row_bytes;
      if (src_quant && dtype == *src_dtype) {
        std::memcpy(d, s, dst_row_bytes);
      } else if (src_quant) {
        tmp.resize(static_cast<size_t>(col_count));
        quant::dequantize_row(*src_dtype, s, tmp.data(), col_count);
        if (dtype == DType::F32) {
          std::memcpy(d, tmp.data(), tmp.size() * 4);
        } else {
          convert_from_f32(tmp.data(), dtype, d, col_count);
        }
      } else if (unfold_norm) {
        tmp.resize(static_cast<size_t>(col_count));
        convert_elements(s, *src_dtype, tmp.data(), DType::F32, col_count);
        for (float& x : tmp) x -= 1.0f;
        convert_elements(tmp.data(), DType::F32, d, dtype, col_count);
      } else {
        convert_elements(s, *src_dtype, d, dtype, col_count);
      }
    }
  }

 private:
  struct Located {
    const GgufTensorInfo* info = nullptr;
    const GgufFile* file = nullptr;
    std::string gguf_name = "?";
    int expert = -1;
  };
  // The tensor behind a Hugging Face name: the merged expert tensor when the file has it, else the
  // older per-expert one.
  Located locate(const std::string& hf_name) const {
    Located l;
    const auto ref = gguf_tensor_ref(hf_name, &arch_);
    if (!ref) return l;
    l.gguf_name = ref->name;
    l.info = model_->tensor(ref->name, &l.file);
    l.expert = ref->expert;
    if (!l.info && !ref->legacy_name.empty()) {
      l.info = model_->tensor(ref->legacy_name, &l.file);
      if (l.info) l.gguf_name = ref->legacy_name, l.expert = -1;
    }
    return l;
  }

  std::shared_ptr<const GgufModel> model_;
  const GgufArchitecture& arch_;
  int64_t heads_ = 0, kv_heads_ = 0;
};

GgufTensorRef named_ref(std::string name) {
  GgufTensorRef r;
  r.name = std::move(name);
  return r;
}

}  // namespace

std::optional<GgufTensorRef> gguf_tensor_ref(std::string_view hf_name, const GgufArchitecture* arch) {
  for (const auto& m : kGlobalNames)
    if (m.hf == hf_name) return named_ref(std::string(m.gguf));
  static constexpr std::string_view kPrefix = "model.layers.";
  if (!hf_name.starts_with(kPrefix)) return std::nullopt;
  std::string_view rest = hf_name.substr(kPrefix.size());
  const auto [layer, digits] = leading_number(rest);
  if (digits == 0 || digits >= rest.size() || rest[digits] != '.') return std::nullopt;
  rest.remove_prefix(digits + 1);
  if (arch) {
    for (const auto& m : arch->layer_names)
      if (m.hf == rest) return named_ref(fmt::format("blk.{}.{}", layer, m.gguf));
  }
  for (const auto& m : kLayerNames)
    if (m.hf == rest) return named_ref(fmt::format("blk.{}.{}", layer, m.gguf));
  for (const auto& m : kExpertNames) {
    if (!rest.starts_with(m.prefix)) continue;
    const std::string_view tail = rest.substr(m.prefix.size());
    const auto [expert, n] = leading_number(tail);
    if (n == 0 || n >= tail.size() || tail[n] != '.' || tail.substr(n + 1) != m.suffix) continue;
    return GgufTensorRef{fmt::format("blk.{}.ffn_{}_exps.weight", layer, m.kind), expert,
                         fmt::format("blk.{}.ffn_{}.{}.weight", layer, m.kind, expert)};
  }
  return std::nullopt;
}

std::optional<std::string> gguf_tensor_name(std::string_view hf_name, const GgufArchitecture* arch) {
  auto ref = gguf_tensor_ref(hf_name, arch);
  if (!ref) return std::nullopt;
  return ref->name;
}

std::optional<DType> dtype_of_ggml(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return DType::F32;
    case GgmlType::F16: return DType::F16;
    case GgmlType::BF16: return DType::BF16;
    case GgmlType::Q4_0: return DType::Q4_0;
    case GgmlType::Q4_1: return DType::Q4_1;
    case GgmlType::Q5_0: return DType::Q5_0;
    case GgmlType::Q5_1: return DType::Q5_1;
    case GgmlType::Q8_0: return DType::Q8_0;
    case GgmlType::Q2_K: return DType::Q2_K;
    case GgmlType::Q3_K: return DType::Q3_K;
    case GgmlType::Q4_K: return DType::Q4_K;
    case GgmlType::Q5_K: return DType::Q5_K;
    case GgmlType::Q6_K: return DType::Q6_K;
    case GgmlType::IQ4_NL: return DType::IQ4_NL;
    case GgmlType::IQ4_XS: return DType::IQ4_XS;
    default: return std::nullopt;
  }
}

std::unique_ptr<WeightSource> make_gguf_weight_source(const ModelFamilies& families,
                                                     std::shared_ptr<const GgufModel> model) {
  return std::make_unique<GgufWeightSource>(families, std::move(model));
}

}  // namespace cypris
