// GGUF metadata -> the config.json of the same model, then the usual config parser (so overrides,
// limits and messages are those of any model). The key table holds the keys every architecture
// shares; each family's architectures and their quirks are its GgufArchitecture rows
// (model_family.h, next to the model file in models/).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/loader/gguf_model.h"

namespace cypris {
namespace {

using json = nlohmann::json;

enum class KeyKind { Int, PerLayerInt, Float };

// {arch}.<gguf key> -> config.json field. PerLayerInt: an integer, or an array with one value per
// layer that must all be equal (llama.cpp writes arrays for models whose layers differ).
struct KeyMap {
  std::string_view gguf_key;
  std::string_view hf_field;
  KeyKind kind;
  bool required;
};
constexpr KeyMap kKeys[] = {
    {"context_length", "max_position_embeddings", KeyKind::Int, true},
    {"embedding_length", "hidden_size", KeyKind::Int, true},
    {"block_count", "num_hidden_layers", KeyKind::Int, true},
    {"feed_forward_length", "intermediate_size", KeyKind::PerLayerInt, true},
    {"attention.head_count", "num_attention_heads", KeyKind::PerLayerInt, true},
    {"attention.head_count_kv", "num_key_value_heads", KeyKind::PerLayerInt, false},
    {"attention.key_length", "head_dim", KeyKind::Int, false},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", KeyKind::Float, false},
    {"rope.freq_base", "rope_theta", KeyKind::Float, false},
    {"attention.sliding_window", "sliding_window", KeyKind::Int, false},
    {"attn_logit_softcapping", "attn_logit_softcapping", KeyKind::Float, false},
    {"final_logit_softcapping", "final_logit_softcapping", KeyKind::Float, false},
    {"attention.layer_norm_epsilon", "layer_norm_eps", KeyKind::Float, false},
    {"logit_scale", "logit_scale", KeyKind::Float, false},
};

int64_t per_layer_int(const GgufModel& m, const std::string& key) {
  const GgufValue* v = m.find(key);
  if (v->type != GgufType::Array) return m.require_int(key);
  const GgufValue* a = m.get_array(key, GgufType::I32);
  CYPRIS_CHECK(a->size() > 0, "{}: metadata '{}' is an empty array", m.describe(), key);
  const int64_t first = a->int_at(0);
  for (uint64_t i = 1; i < a->size(); ++i) {
    CYPRIS_CHECK(a->int_at(i) == first,
                 "{}: metadata '{}' differs between layers ({} and {}); models whose layers differ are not supported",
                 m.describe(), key, first, a->int_at(i));
  }
  return first;
}

// llama.cpp stores Llama 3.1's rope scaling as per-frequency factors (rope_freqs.weight) instead of
// its parameters. Every published Llama 3.x uses low/high frequency factors 1 and 4 over an
// original context of 8192; the factor is the largest entry. The guess is checked against the
// tensor entry by entry, so a model with other parameters is an error, not silently wrong.
json llama3_scaling_from_freqs(const GgufModel& m, const std::string& arch, int64_t head_dim, double theta) {
  const GgufTensorInfo* t = m.tensor("rope_freqs.weight");
  CYPRIS_CHECK(t->type == GgmlType::F32 && t->ne.size() == 1 && t->ne[0] * 2 == head_dim,
               "{}: tensor 'rope_freqs.weight' must be F32 with head_dim / 2 = {} entries", m.describe(), head_dim / 2);
  std::vector<float> f(static_cast<size_t>(t->ne[0]));
  std::memcpy(f.data(), t->data, f.size() * 4);
  double factor = 1;
  for (float x : f) factor = std::max<double>(factor, x);
  const double original =
      static_cast<double>(m.get_int(arch + ".rope.scaling.original_context_length").value_or(8192));
  const double low = 1.0, high = 4.0;
  const double low_wavelen = original / low, high_wavelen = original / high;
  for (size_t i = 0; i < f.size(); ++i) {
    // The same rule as HF's _compute_llama3_parameters, as a divisor of the frequency.
    const double freq = 1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double wavelen = 2 * M_PI / freq;
    double expect = 1.0;
    if (wavelen > low_wavelen) {
      expect = factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (original / wavelen - low) / (high - low);
      expect = 1.0 / ((1 - smooth) / factor + smooth);
    }
    CYPRIS_CHECK(std::abs(expect - f[i]) <= 1e-3 * expect,
                 "{}: tensor 'rope_freqs.weight' does not match Llama 3 rope scaling (factor {}, low/high frequency "
                 "factors 1/4, original context {}): entry {} is {}, expected {}; not supported",
                 m.describe(), factor, original, i, f[i], expect);
  }
  return {{"rope_type", "llama3"},
          {"factor", factor},
          {"low_freq_factor", low},
          {"high_freq_factor", high},
          {"original_max_position_embeddings", original}};
}

}  // namespace

const GgufArchitecture& gguf_architecture(const ModelFamilies& families, const GgufModel& m) {
  const auto arch = m.get_string("general.architecture");
  CYPRIS_CHECK(arch.has_value(), "{}: required metadata 'general.architecture' is missing", m.describe());
  if (const GgufArchitecture* a = find_gguf_architecture(families, *arch)) return *a;
  std::string known;
  const ModelFamily* last = nullptr;
  for (const auto& row : families) {
    if (row.family == last) continue;  // a family's rows are consecutive in the registry
    last = row.family;
    for (const auto& a : row.family->gguf) known += (known.empty() ? "" : ", ") + std::string(a.gguf_arch);
  }
  CYPRIS_FAIL("{}: GGUF architecture '{}' is not supported (supported: {})", m.describe(), *arch, known);
}

// Phi-3's LongRoPE: llama.cpp stores the two per-frequency factor lists as F32 tensors and the
// pre-training length as rope.scaling.original_context_length.
static json longrope_from_factors(const GgufModel& m, const std::string& arch) {
  auto factors = [&](const char* name) {
    const GgufTensorInfo* t = m.tensor(name);
    CYPRIS_CHECK(t != nullptr, "{}: LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; "
                 "'{}' is missing", m.describe(), name);
    CYPRIS_CHECK(t->type == GgmlType::F32 && t->ne.size() == 1 && t->ne[0] > 0 && t->ne[0] <= 4096,
                 "{}: tensor '{}' must be a 1-D F32 list of at most 4096 factors", m.describe(), name);
    std::vector<float> f(static_cast<size_t>(t->ne[0]));
    std::memcpy(f.data(), t->data, f.size() * 4);
    return f;
  };
  const auto orig = m.get_int(arch + ".rope.scaling.original_context_length");
  CYPRIS_CHECK(orig.has_value() && *orig > 0,
               "{}: LongRoPE needs metadata '{}.rope.scaling.original_context_length' (the pre-training length)",
               m.describe(), arch);
  return {{"rope_type", "longrope"},
          {"long_factor", factors("rope_factors_long.weight")},
          {"short_factor", factors("rope_factors_short.weight")},
          {"original_max_position_embeddings", *orig}};
}

json gguf_hf_config(const ModelFamilies& families, const GgufModel& m) {
  const GgufArchitecture& a = gguf_architecture(families, m);
  const std::string arch(a.gguf_arch);
  json j;
  j["architectures"] = {std::string(a.hf_architecture)};
  j["model_type"] = std::string(a.model_type);
  for (const auto& k : kKeys) {
    const std::string key = arch + "." + std::string(k.gguf_key);
    if (!m.find(key)) {
      CYPRIS_CHECK(!k.required, "{}: required metadata '{}' is missing", m.describe(), key);
      continue;
    }
    switch (k.kind) {
      case KeyKind::Int: j[std::string(k.hf_field)] = m.require_int(key); break;
      case KeyKind::PerLayerInt: j[std::string(k.hf_field)] = per_layer_int(m, key); break;
      case KeyKind::Float: j[std::string(k.hf_field)] = *m.get_double(key); break;
    }
  }
  const int64_t heads = j.at("num_attention_heads").get<int64_t>();
  CYPRIS_CHECK(heads > 0, "{}: metadata '{}.attention.head_count' must be positive", m.describe(), arch);
  const int64_t head_dim = j.contains("head_dim") ? j.at("head_dim").get<int64_t>()
                                                  : j.at("hidden_size").get<int64_t>() / heads;
  if (auto rot = m.get_int(arch + ".rope.dimension_count"); rot && *rot != head_dim && head_dim > 0) {
    j["partial_rotary_factor"] = static_cast<double>(*rot) / static_cast<double>(head_dim);
  }

  // Rope scaling: the explicit keys, or Llama 3's frequency factors.
  const std::string type = m.get_string(arch + ".rope.scaling.type").value_or("none");
  const double theta = j.value("rope_theta", 10000.0);
  if (m.tensor("rope_freqs.weight")) {
    j["rope_scaling"] = llama3_scaling_from_freqs(m, arch, head_dim, theta);
  } else if (m.tensor("rope_factors_long.weight") || m.tensor("rope_factors_short.weight")) {
    j["rope_scaling"] = longrope_from_factors(m, arch);
    j["original_max_position_embeddings"] = j["rope_scaling"]["original_max_position_embeddings"];
  } else if (type == "linear" || type == "yarn") {
    const auto factor = m.get_double(arch + ".rope.scaling.factor");
    CYPRIS_CHECK(factor.has_value(), "{}: rope scaling type '{}' needs metadata '{}.rope.scaling.factor'",
                 m.describe(), type, arch);
    json rs = {{"rope_type", type}, {"factor", *factor}};
    if (auto orig = m.get_int(arch + ".rope.scaling.original_context_length"))
      rs["original_max_position_embeddings"] = *orig;
    j["rope_scaling"] = rs;
  } else if (auto scale = m.get_double(arch + ".rope.scale_linear"); scale && *scale != 1.0) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", *scale}};  // the older key
  } else {
    CYPRIS_CHECK(type == "none", "{}: metadata '{}.rope.scaling.type' is '{}'; supported: none, linear, yarn",
                 m.describe(), arch, type);
  }

  // The vocabulary: the tokenizer's list, else the key, else the embedding's rows.
  if (const GgufValue* toks = m.get_array("tokenizer.ggml.tokens", GgufType::String)) {
    j["vocab_size"] = toks->size();
  } else if (auto v = m.get_int(arch + ".vocab_size")) {
    j["vocab_size"] = *v;
  } else if (const GgufTensorInfo* e = m.tensor("token_embd.weight"); e && e->ne.size() == 2) {
    j["vocab_size"] = e->ne[1];
  }
  j.update(json::parse(a.fixed_config));
  // Mixture of experts: the routed experts (the architecture's adjust may name another model for
  // them, as llama.cpp writes Mixtral as "llama" with an expert count).
  if (auto experts = m.get_int(arch + ".expert_count"); experts && *experts > 0) {
    CYPRIS_CHECK(a.experts != GgufExperts::None, "{}: '{}' files with experts are not supported", m.describe(), arch);
    const auto used = m.get_int(arch + ".expert_used_count");
    CYPRIS_CHECK(used.has_value(), "{}: metadata '{}.expert_used_count' is missing (the file has {} experts)",
                 m.describe(), arch, *experts);
    j["num_experts_per_tok"] = *used;
    j["num_experts"] = *experts;
    if (auto ff = m.get_int(arch + ".expert_feed_forward_length")) j["moe_intermediate_size"] = *ff;
    if (auto ff = m.get_int(arch + ".expert_shared_feed_forward_length")) j["shared_expert_intermediate_size"] = *ff;
  } else {
    CYPRIS_CHECK(a.experts != GgufExperts::Required, "{}: metadata '{}.expert_count' is missing", m.describe(), arch);
  }
  if (a.adjust) a.adjust(m, j);
  j["tie_word_embeddings"] = m.tensor("output.weight") == nullptr;
  if (!a.qkv_bias && m.tensor("blk.0.attn_q.bias") && m.tensor("blk.0.attn_output.bias")) j["attention_bias"] = true;
  if (const GgufTensorInfo* e = m.tensor("token_embd.weight")) {
    j["torch_dtype"] = e->type == GgmlType::F32 ? "float32" : e->type == GgmlType::BF16 ? "bfloat16" : "float16";
  }
  if (auto bos = m.get_int("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = *bos;
  if (auto eos = m.get_int("tokenizer.ggml.eos_token_id")) j["eos_token_id"] = *eos;
  return j;
}

ModelConfig gguf_model_config(const ModelFamilies& families, const GgufModel& m, const ConfigOverrides& overrides) {
  return parse_model_config(families, gguf_hf_config(families, m).dump(), m.describe(), overrides);
}

}  // namespace cypris
