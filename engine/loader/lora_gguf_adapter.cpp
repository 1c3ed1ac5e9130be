// llama.cpp's GGUF LoRA adapters (convert_lora_to_gguf.py): general.type "adapter", adapter.type
// "lora", adapter.lora.alpha, and per adapted weight "blk.N.<tensor>.weight.lora_a" (A, ggml ne
// [in, r], so [r, in] row-major like PEFT's lora_A) and ".lora_b" (B, ne [r, out], [out, r]). The
// converter runs the base architecture's own tensor transforms on the (A, B) pair, which for
// llama's q/k projections permutes B's rows into llama.cpp's interleaved rotary order; the model's
// head counts undo that (undo_gguf_qk_permutation). The scale is llama.cpp's: alpha / r, or 1 when
// alpha is 0 (rsLoRA does not survive the conversion).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/loader/gguf.h"
#include "engine/loader/gguf_model.h"
#include "engine/loader/lora_adapter.h"
#include "kernels/cpu/quant/quant_ref.h"

namespace cypris {
namespace {

// llama.cpp's layer tensor -> the Hugging Face module (without ".weight") Cypris names LoRA sites by.
// ffn_up is also Phi-3's fused gate_up (told apart by the base model's MLP width, Engine::read_lora).
constexpr std::pair<std::string_view, std::string_view> kModules[] = {
    {"attn_q", "self_attn.q_proj"},   {"attn_k", "self_attn.k_proj"},       {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"}, {"attn_qkv", "self_attn.qkv_proj"}, {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},        {"ffn_down", "mlp.down_proj"},
};

HostTensor read_f32(const GgufTensorInfo& t, const std::string& where) {
  const std::optional<DType> src = dtype_of_ggml(t.type);
  CYPRIS_CHECK(src && (!dtype_is_quantized(*src) || quant::supported(*src)),
               "{}: tensor '{}' has type {}, which Cypris cannot read", where, t.name, ggml_traits(t.type).name);
  CYPRIS_CHECK(t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0,
               "{}: tensor '{}' has {} dimensions; LoRA A and B are matrices", where, t.name, t.shape.size());
  HostTensor h;
  h.dtype = DType::F32;
  h.shape = t.shape;
  h.buffer = Buffer(static_cast<size_t>(t.shape[0] * t.shape[1]) * sizeof(float));
  float* out = reinterpret_cast<float*>(h.buffer.data());
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const size_t row_bytes = dtype_nbytes(*src, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = t.data + static_cast<size_t>(r) * row_bytes;
    if (dtype_is_quantized(*src)) {
      quant::dequantize_row(*src, s, out + r * cols, cols);
    } else {
      convert_elements(s, *src, out + r * cols, DType::F32, cols);
    }
  }
  return h;
}

}  // namespace

LoraAdapter load_gguf_lora_adapter(const std::filesystem::path& file, int64_t max_rank) {
  const GgufModel model(file);
  const std::string where = file.string();
  const std::optional<std::string> type = model.get_string("general.type");
  CYPRIS_CHECK(type == "adapter",
               "{}: general.type is '{}', not 'adapter': this GGUF file is a model, not a LoRA adapter (llama.cpp's "
               "convert_lora_to_gguf.py writes adapters)",
               where, type.value_or("(none)"));
  const std::optional<std::string> adapter_type = model.get_string("adapter.type");
  CYPRIS_CHECK(adapter_type == "lora", "{}: adapter.type is '{}'; only 'lora' adapters are supported", where,
               adapter_type.value_or("(none)"));
  CYPRIS_CHECK(!model.find("adapter.alora.invocation_tokens"),
               "{}: activated LoRA (adapter.alora.invocation_tokens) is not supported", where);
  LoraAdapter a;
  a.path = where;
  a.gguf_arch = model.get_string("general.architecture").value_or("");
  CYPRIS_CHECK(!a.gguf_arch.empty(), "{}: no general.architecture (the base model's llama.cpp architecture)", where);
  a.alpha = model.get_double("adapter.lora.alpha").value_or(0.0);
  CYPRIS_CHECK(std::isfinite(a.alpha) && a.alpha >= 0, "{}: adapter.lora.alpha {} must be a number >= 0", where,
               a.alpha);

  struct Pair {
    const GgufTensorInfo* a = nullptr;
    const GgufTensorInfo* b = nullptr;
  };
  std::map<std::string, Pair> pairs;
  for (const auto& [name, located] : model.tensors()) {
    const GgufTensorInfo* t = located.first;
    const bool is_a = name.ends_with(".weight.lora_a"), is_b = name.ends_with(".weight.lora_b");
    CYPRIS_CHECK(is_a || is_b,
                 "{}: tensor '{}' is not a LoRA A or B weight (norms or other tensors saved whole, as "
                 "mergekit-extract-lora writes them, are not supported)",
                 where, name);
    const std::string base = name.substr(0, name.size() - std::string(".weight.lora_a").size());
    CYPRIS_CHECK(!base.starts_with("token_embd") && !base.starts_with("output"),
                 "{}: '{}' is LoRA on the embedding or the LM head, which is not supported (only the attention and "
                 "MLP projections)",
                 where, name);
    // "blk.N.<tensor>"
    std::string module;
    if (base.starts_with("blk.")) {
      const size_t dot = base.find('.', 4);
      const std::string layer = dot == std::string::npos ? "" : base.substr(4, dot - 4);
      const std::string tensor = dot == std::string::npos ? "" : base.substr(dot + 1);
      const bool digits = !layer.empty() && layer.size() <= 6 &&
                          layer.find_first_not_of("0123456789") == std::string::npos;
      for (const auto& [g, hf] : kModules) {
        if (digits && tensor == g) module = fmt::format("model.layers.{}.{}", layer, hf);
      }
    }
    CYPRIS_CHECK(!module.empty(),
                 "{}: tensor '{}' adapts no projection LoRA applies to (blk.N.attn_q/k/v/output/qkv, "
                 "ffn_gate/up/down, not experts)",
                 where, name);
    (is_a ? pairs[module].a : pairs[module].b) = t;
  }
  CYPRIS_CHECK(!pairs.empty(), "{}: the adapter holds no .lora_a / .lora_b tensors", where);
  for (const auto& [module, p] : pairs) {
    CYPRIS_CHECK(p.a && p.b, "{}: module '{}' has lora_{} but no lora_{}", where, module, p.a ? "a" : "b",
                 p.a ? "b" : "a");
    LoraModule m{read_f32(*p.a, where), read_f32(*p.b, where)};
    const int64_t r = m.a.shape[0];
    CYPRIS_CHECK(m.b.shape[1] == r,
                 "{}: '{}' has lora_a {} and lora_b {}: A must be [r, in] and B [out, r] (ggml ne [in, r] and [r, "
                 "out]; a transposed lora_a comes from an old converter)",
                 where, p.a->name, fmt::join(m.a.shape, "x"), fmt::join(m.b.shape, "x"));
    if (a.rank == 0) a.rank = r;
    CYPRIS_CHECK(r == a.rank, "{}: '{}' has rank {} but other modules rank {}; one rank per adapter is supported",
                 where, p.a->name, r, a.rank);
    a.modules.emplace(module, std::move(m));
  }
  CYPRIS_CHECK(a.rank <= max_rank, "{}: rank {} is above --max-lora-rank {}; raise --max-lora-rank (8 to 256)", where,
               a.rank, max_rank);
  a.scale = a.alpha > 0 ? lora_scale(a.alpha, a.rank, false) : 1.0f;
  return a;
}

void undo_gguf_qk_permutation(LoraAdapter& a, int64_t heads, int64_t kv_heads) {
  for (auto& [module, m] : a.modules) {
    const bool q = module.ends_with(".self_attn.q_proj"), k = module.ends_with(".self_attn.k_proj");
    if (!q && !k) continue;
    const int64_t n = q ? heads : kv_heads, rows = m.b.shape[0], r = m.b.shape[1];
    CYPRIS_CHECK(n > 0 && rows % n == 0 && (rows / n) % 2 == 0,
                 "{}: module '{}': lora_b has {} rows, which do not split into {} heads of an even size", a.path,
                 module, rows, n);
    const int64_t d = rows / n, half = d / 2;
    const float* src = reinterpret_cast<const float*>(m.b.buffer.data());
    Buffer out(m.b.buffer.size());
    float* dst = reinterpret_cast<float*>(out.data());
    // llama.cpp's row h*d + 2i + s is Hugging Face row h*d + s*d/2 + i.
    for (int64_t h = 0; h < n; ++h)
      for (int64_t i = 0; i < half; ++i)
        for (int64_t s = 0; s < 2; ++s)
          std::memcpy(dst + (h * d + s * half + i) * r, src + (h * d + 2 * i + s) * r,
                      static_cast<size_t>(r) * sizeof(float));
    m.b.buffer = std::move(out);
  }
}

}  // namespace cypris
