#include "engine/loader/model_config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/loader/gguf_model.h"

namespace cypris {
namespace {

using json = nlohmann::json;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  CYPRIS_CHECK(in.good(), "cannot read {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json(const std::string& text, const std::string& source) {
  try {
    json j = json::parse(text);
    CYPRIS_CHECK(j.is_object(), "{}: expected a JSON object at the top level", source);
    return j;
  } catch (const json::exception& e) {
    CYPRIS_FAIL("{}: malformed JSON: {}", source, e.what());
  }
}

// Fields may be absent or null (HF writes null for unset values).
bool has(const json& j, const char* key) {
  return j.contains(key) && !j.at(key).is_null();
}

int64_t get_int(const json& j, const char* key, const std::string& source, std::optional<int64_t> def = {}) {
  if (!has(j, key)) {
    CYPRIS_CHECK(def.has_value(), "{}: required field '{}' is missing", source, key);
    return *def;
  }
  const json& v = j.at(key);
  CYPRIS_CHECK(
      v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<int64_t>(v.get<double>())),
      "{}: field '{}' must be an integer, got {}", source, key, v.dump());
  return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
}

// A token id field: it must fit an int32 id.
int32_t id_field(const json& j, const char* key, const std::string& source) {
  const int64_t v = get_int(j, key, source);
  CYPRIS_CHECK(v >= 0 && v <= INT32_MAX, "{}: field '{}' must be a token id (0..{}), got {}", source, key, INT32_MAX, v);
  return static_cast<int32_t>(v);
}

double get_double(const json& j, const char* key, const std::string& source, std::optional<double> def = {}) {
  if (!has(j, key)) {
    CYPRIS_CHECK(def.has_value(), "{}: required field '{}' is missing", source, key);
    return *def;
  }
  const json& v = j.at(key);
  CYPRIS_CHECK(v.is_number(), "{}: field '{}' must be a number, got {}", source, key, v.dump());
  return v.get<double>();
}

std::optional<double> get_opt_double(const json& j, const char* key, const std::string& source) {
  if (!has(j, key)) return std::nullopt;
  return get_double(j, key, source);
}

bool get_bool(const json& j, const char* key, const std::string& source, bool def) {
  if (!has(j, key)) return def;
  CYPRIS_CHECK(j.at(key).is_boolean(), "{}: field '{}' must be true or false, got {}", source, key, j.at(key).dump());
  return j.at(key).get<bool>();
}

std::string get_string(const json& j, const char* key, const std::string& source, const std::string& def) {
  if (!has(j, key)) return def;
  CYPRIS_CHECK(j.at(key).is_string(), "{}: field '{}' must be a string, got {}", source, key, j.at(key).dump());
  return j.at(key).get<std::string>();
}

std::vector<int32_t> get_id_list(const json& j, const char* key, const std::string& source) {
  std::vector<int32_t> ids;
  if (!has(j, key)) return ids;
  const json& v = j.at(key);
  auto one = [&](const json& e) {
    CYPRIS_CHECK(e.is_number_integer(), "{}: field '{}' must hold integers, got {}", source, key, e.dump());
    const int64_t id = e.get<int64_t>();
    CYPRIS_CHECK(id >= 0 && id <= INT32_MAX, "{}: field '{}' holds {}, not a token id (0..{})", source, key, id,
                 INT32_MAX);
    ids.push_back(static_cast<int32_t>(id));
  };
  if (v.is_number_integer()) {
    one(v);
  } else {
    CYPRIS_CHECK(v.is_array(), "{}: field '{}' must be an integer or a list of integers", source, key);
    CYPRIS_CHECK(v.size() <= 1024, "{}: field '{}' lists {} ids (at most 1024)", source, key, v.size());
    for (const auto& e : v) one(e);
  }
  return ids;
}

RopeScaling rope_scaling_from_json(const json& r, const std::string& source) {
  CYPRIS_CHECK(r.is_object(), "{}: rope_scaling must be a JSON object, got {}", source, r.dump());
  const std::string src = source + ": rope_scaling";
  RopeScaling rs;
  rs.type = get_string(r, "rope_type", src, get_string(r, "type", src, "default"));
  if (rs.type == "mrope") rs.type = "default";  // same frequencies; the sections only matter for vision models
  if (rs.type == "su") rs.type = "longrope";     // Phi-3's early name for it
  const bool known = rs.type == "default" || rs.type == "linear" || rs.type == "dynamic" || rs.type == "yarn" ||
                     rs.type == "llama3" || rs.type == "longrope";
  CYPRIS_CHECK(known,
               "{}: rope_type '{}' is not supported; supported: default, linear, dynamic, yarn, llama3, longrope", src,
               rs.type);
  if (rs.type == "longrope") {
    for (auto [key, dst] : {std::pair{"short_factor", &rs.short_factor}, std::pair{"long_factor", &rs.long_factor}}) {
      CYPRIS_CHECK(has(r, key) && r.at(key).is_array(), "{}: longrope needs '{}' (a list of numbers)", src, key);
      for (const auto& e : r.at(key)) {
        CYPRIS_CHECK(e.is_number() && e.get<double>() > 0, "{}: '{}' must hold positive numbers, got {}", src, key,
                     e.dump());
        dst->push_back(e.get<double>());
      }
    }
    rs.factor = get_double(r, "factor", src, 1.0);
    rs.attention_factor = get_opt_double(r, "attention_factor", src);
  } else if (rs.type != "default") {
    rs.factor = get_double(r, "factor", src);
    CYPRIS_CHECK(rs.factor >= 1.0, "{}: 'factor' must be >= 1, got {}", src, rs.factor);
  }
  rs.original_max_position_embeddings = get_opt_double(r, "original_max_position_embeddings", src);
  if (rs.type == "llama3") {
    rs.low_freq_factor = get_double(r, "low_freq_factor", src);
    rs.high_freq_factor = get_double(r, "high_freq_factor", src);
    CYPRIS_CHECK(rs.original_max_position_embeddings.has_value(), "{}: llama3 needs 'original_max_position_embeddings'",
                 src);
    CYPRIS_CHECK(rs.low_freq_factor < rs.high_freq_factor,
                 "{}: llama3 needs low_freq_factor < high_freq_factor, got {} and {}", src, rs.low_freq_factor,
                 rs.high_freq_factor);
  }
  if (rs.type == "yarn") {
    rs.attention_factor = get_opt_double(r, "attention_factor", src);
    rs.beta_fast = get_opt_double(r, "beta_fast", src);
    rs.beta_slow = get_opt_double(r, "beta_slow", src);
    rs.mscale = get_opt_double(r, "mscale", src);
    rs.mscale_all_dim = get_opt_double(r, "mscale_all_dim", src);
    rs.truncate = get_bool(r, "truncate", src, true);
  }
  return rs;
}

}  // namespace

bool ConfigFields::has(const char* key) const { return cypris::has(j_, key); }
int64_t ConfigFields::get_int(const char* key, std::optional<int64_t> def) const {
  return cypris::get_int(j_, key, source_, def);
}
double ConfigFields::get_double(const char* key, std::optional<double> def) const {
  return cypris::get_double(j_, key, source_, def);
}
std::optional<double> ConfigFields::get_opt_double(const char* key) const {
  return cypris::get_opt_double(j_, key, source_);
}
bool ConfigFields::get_bool(const char* key, bool def) const { return cypris::get_bool(j_, key, source_, def); }
std::string ConfigFields::get_string(const char* key, const std::string& def) const {
  return cypris::get_string(j_, key, source_, def);
}

const ModelFamily* find_family(const ModelFamilies& families, const std::vector<std::string>& architectures) {
  for (const auto& a : architectures) {
    for (const auto& row : families) {
      if (row.architecture == a) return row.family;
    }
  }
  return nullptr;
}

const GgufArchitecture* find_gguf_architecture(const ModelFamilies& families, std::string_view gguf_arch) {
  for (const auto& row : families) {
    for (const auto& g : row.family->gguf) {
      if (g.gguf_arch == gguf_arch) return &g;
    }
  }
  return nullptr;
}

RopeScaling parse_rope_scaling(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    CYPRIS_FAIL("{}: malformed JSON: {}", source, e.what());
  }
  return rope_scaling_from_json(j, source);
}

int64_t max_allowed_model_len(const ModelConfig& cfg) {
  const RopeScaling& rs = cfg.rope_scaling;
  const double max_pos = static_cast<double>(cfg.max_position_embeddings);
  double allowed = max_pos;
  if (rs.type == "linear" || rs.type == "dynamic") allowed = max_pos * rs.factor;
  if (rs.type == "yarn" || rs.type == "llama3") {
    allowed = std::max(max_pos, rs.original_max_position_embeddings.value_or(max_pos) * rs.factor);
  }
  // A huge factor must not become a huge (or wrapped) length.
  return static_cast<int64_t>(std::min(allowed, static_cast<double>(kMaxPositions)));
}

ModelConfig parse_model_config(const ModelFamilies& families, const std::string& config_json,
                               const std::string& source, const ConfigOverrides& overrides,
                               const std::string& generation_json) {
  json j = parse_json(config_json, source);
  // A multimodal checkpoint (Gemma3ForConditionalGeneration) nests the language model's config
  // under text_config: its fields are read as if they were at the top level.
  if (has(j, "text_config")) {
    CYPRIS_CHECK(j.at("text_config").is_object(), "{}: text_config must be a JSON object", source);
    const json text = j.at("text_config");
    for (const auto& [key, value] : text.items()) {
      if (!value.is_null()) j[key] = value;
    }
  }
  ModelConfig c;
  c.source = source;
  if (has(j, "architectures")) {
    CYPRIS_CHECK(j.at("architectures").is_array(), "{}: 'architectures' must be a list of names", source);
    for (const auto& a : j.at("architectures")) {
      CYPRIS_CHECK(a.is_string(), "{}: 'architectures' must be a list of names", source);
      c.architectures.push_back(a.get<std::string>());
    }
  }
  CYPRIS_CHECK(!c.architectures.empty(), "{}: required field 'architectures' is missing or empty", source);
  const ModelFamily* family = find_family(families, c.architectures);
  const ConfigFields fields(j, source);
  c.model_type = get_string(j, "model_type", source, "");
  c.hidden_size = get_int(j, "hidden_size", source);
  c.intermediate_size = get_int(j, "intermediate_size", source);
  c.num_hidden_layers = static_cast<int>(std::clamp<int64_t>(get_int(j, "num_hidden_layers", source), -1, INT32_MAX));
  c.num_attention_heads = static_cast<int>(std::clamp<int64_t>(get_int(j, "num_attention_heads", source), -1, INT32_MAX));
  c.num_key_value_heads =
      static_cast<int>(std::clamp<int64_t>(get_int(j, "num_key_value_heads", source, c.num_attention_heads), -1, INT32_MAX));
  c.vocab_size = get_int(j, "vocab_size", source);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", source, 2048);
  CYPRIS_CHECK(c.hidden_size > 0 && c.hidden_size <= (1 << 20), "{}: hidden_size {} is out of range", source,
               c.hidden_size);
  CYPRIS_CHECK(c.intermediate_size > 0 && c.intermediate_size <= (1 << 22), "{}: intermediate_size {} is out of range",
               source, c.intermediate_size);
  CYPRIS_CHECK(c.num_hidden_layers > 0 && c.num_hidden_layers <= 4096, "{}: num_hidden_layers {} is out of range",
               source, c.num_hidden_layers);
  CYPRIS_CHECK(c.num_attention_heads > 0 && c.num_attention_heads <= 4096, "{}: num_attention_heads {} is out of range",
               source, c.num_attention_heads);
  CYPRIS_CHECK(c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads == 0,
               "{}: num_key_value_heads {} must be positive and divide num_attention_heads {}", source,
               c.num_key_value_heads, c.num_attention_heads);
  CYPRIS_CHECK(c.vocab_size > 0 && c.vocab_size <= (1 << 24), "{}: vocab_size {} is out of range", source,
               c.vocab_size);
  // Positions size the rope table and the KV cache: 2^24 (16M) is past every released model and
  // keeps max_len * head_dim far from overflowing (2^62 used to wrap and crash).
  CYPRIS_CHECK(c.max_position_embeddings > 0 && c.max_position_embeddings <= kMaxPositions,
               "{}: max_position_embeddings {} is out of range (1..{})", source, c.max_position_embeddings,
               kMaxPositions);
  if (has(j, "head_dim")) {
    const int64_t hd = get_int(j, "head_dim", source);
    CYPRIS_CHECK(hd > 0 && hd <= 1024, "{}: head_dim {} is out of range (2..1024, even)", source, hd);
    c.head_dim = static_cast<int>(hd);
  } else {
    CYPRIS_CHECK(c.hidden_size % c.num_attention_heads == 0,
                 "{}: hidden_size {} is not divisible by num_attention_heads {} (and no head_dim is given)", source,
                 c.hidden_size, c.num_attention_heads);
    c.head_dim = static_cast<int>(c.hidden_size / c.num_attention_heads);
  }
  CYPRIS_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0 && c.head_dim <= 1024, "{}: head_dim {} must be even and positive",
               source, c.head_dim);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", source, 1e-6);
  c.rope_theta = get_double(j, "rope_theta", source, 10000.0);
  c.partial_rotary_factor = get_double(j, "partial_rotary_factor", source, 1.0);
  CYPRIS_CHECK(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1.0 && c.rotary_dim() % 2 == 0,
               "{}: partial_rotary_factor {} must be in (0, 1] and give an even rotary dimension", source,
               c.partial_rotary_factor);
  if (has(j, "rope_scaling")) c.rope_scaling = rope_scaling_from_json(j.at("rope_scaling"), source);
  if (c.rope_scaling.type == "longrope") {
    // Phi-3 keeps the pre-training length at the top level; it sets the scaling factor too.
    if (has(j, "original_max_position_embeddings")) {
      c.rope_scaling.original_max_position_embeddings = get_double(j, "original_max_position_embeddings", source);
    }
    const size_t half = static_cast<size_t>(c.rotary_dim() / 2);
    CYPRIS_CHECK(c.rope_scaling.short_factor.size() == half && c.rope_scaling.long_factor.size() == half,
                 "{}: rope_scaling short_factor and long_factor need rotary_dim / 2 = {} entries, got {} and {}", source,
                 half, c.rope_scaling.short_factor.size(), c.rope_scaling.long_factor.size());
  }
  // Gemma names its activation hidden_activation (its hidden_act is a legacy field).
  const std::string act = get_string(j, "hidden_activation", source, get_string(j, "hidden_act", source, "silu"));
  if (act == "silu" || act == "swish") {
    c.hidden_act = "silu";
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_tanh" || act == "gelu_new" ||
             (act == "gelu" && family && family->gelu_is_tanh)) {
    c.hidden_act = "gelu_tanh";
  } else {
    CYPRIS_FAIL("{}: hidden_act '{}' is not supported (silu, gelu_pytorch_tanh)", source, act);
  }
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, family && family->tied_embeddings);
  c.torch_dtype = get_string(j, "torch_dtype", source, get_string(j, "dtype", source, ""));
  c.qkv_bias = c.o_bias = get_bool(j, "attention_bias", source, false);
  c.mlp_bias = get_bool(j, "mlp_bias", source, false);

  // Sliding window per layer. Explicit layer_types win; else the family says which layers slide
  // (every one by default, as Mistral).
  c.layer_sliding_window.assign(c.num_hidden_layers, 0);
  int window = 0;
  if (has(j, "sliding_window")) {
    const int64_t w = get_int(j, "sliding_window", source);
    CYPRIS_CHECK(w > 0 && w <= INT32_MAX, "{}: sliding_window must be positive or null, got {}", source, w);
    window = static_cast<int>(w);
  }
  if (has(j, "layer_types")) {
    const json& lt = j.at("layer_types");
    CYPRIS_CHECK(lt.is_array() && lt.size() == static_cast<size_t>(c.num_hidden_layers),
                 "{}: layer_types must list one type per layer ({})", source, c.num_hidden_layers);
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
      CYPRIS_CHECK(t == "full_attention" || t == "sliding_attention",
                   "{}: layer_types[{}] must be full_attention or sliding_attention", source, i);
      if (t == "sliding_attention") {
        CYPRIS_CHECK(window > 0, "{}: layer_types[{}] is sliding_attention but sliding_window is not set", source, i);
        c.layer_sliding_window[i] = window;
      }
    }
  } else if (window > 0) {
    if (family && family->sliding_layers) {
      family->sliding_layers(fields, c, window);
    } else {
      c.layer_sliding_window.assign(c.num_hidden_layers, window);
    }
  }

  // Mixture of experts: Qwen3-MoE's num_experts, Mixtral's num_local_experts.
  c.num_experts = static_cast<int>(get_int(j, "num_experts", source, get_int(j, "num_local_experts", source, 0)));
  c.layer_is_moe.assign(c.num_hidden_layers, false);
  if (c.num_experts > 0) {
    CYPRIS_CHECK(c.num_experts <= 4096, "{}: num_experts {} is out of range", source, c.num_experts);
    c.num_experts_per_tok = static_cast<int>(get_int(j, "num_experts_per_tok", source));
    CYPRIS_CHECK(c.num_experts_per_tok > 0 && c.num_experts_per_tok <= c.num_experts,
                 "{}: num_experts_per_tok {} must be in [1, num_experts = {}]", source, c.num_experts_per_tok,
                 c.num_experts);
    c.moe_intermediate_size = get_int(j, "moe_intermediate_size", source, c.intermediate_size);
    CYPRIS_CHECK(c.moe_intermediate_size > 0 && c.moe_intermediate_size <= (1 << 22),
                 "{}: moe_intermediate_size {} is out of range", source, c.moe_intermediate_size);
    c.shared_expert_intermediate_size = get_int(j, "shared_expert_intermediate_size", source, 0);
    CYPRIS_CHECK(c.shared_expert_intermediate_size >= 0 && c.shared_expert_intermediate_size <= (1 << 22),
                 "{}: shared_expert_intermediate_size {} is out of range", source, c.shared_expert_intermediate_size);
    // Qwen-MoE renormalises the top-k gates when norm_topk_prob (default false); Mixtral always does
    // (its family's read_config).
    c.norm_topk_prob = get_bool(j, "norm_topk_prob", source, false);
    const int64_t step = get_int(j, "decoder_sparse_step", source, 1);
    CYPRIS_CHECK(step >= 1, "{}: decoder_sparse_step must be at least 1, got {}", source, step);
    std::vector<int> dense_layers;
    if (has(j, "mlp_only_layers")) {
      CYPRIS_CHECK(j.at("mlp_only_layers").is_array(), "{}: mlp_only_layers must be a list of layer indices", source);
      for (const auto& e : j.at("mlp_only_layers")) {
        CYPRIS_CHECK(e.is_number_integer() && e.get<int>() >= 0 && e.get<int>() < c.num_hidden_layers,
                     "{}: mlp_only_layers holds {}, not a layer index below {}", source, e.dump(), c.num_hidden_layers);
        dense_layers.push_back(e.get<int>());
      }
    }
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const bool dense = std::find(dense_layers.begin(), dense_layers.end(), i) != dense_layers.end();
      c.layer_is_moe[i] = !dense && (i + 1) % step == 0;
    }
  }

  if (family && family->read_config) family->read_config(fields, c);

  if (has(j, "bos_token_id")) c.bos_token_id = id_field(j, "bos_token_id", source);
  c.eos_token_ids = get_id_list(j, "eos_token_id", source);
  if (!generation_json.empty()) {
    const std::string gsrc = (std::filesystem::path(source).parent_path() / "generation_config.json").string();
    const json g = parse_json(generation_json, gsrc);
    if (has(g, "bos_token_id")) c.bos_token_id = id_field(g, "bos_token_id", gsrc);
    auto eos = get_id_list(g, "eos_token_id", gsrc);
    if (!eos.empty()) c.eos_token_ids = eos;
  }

  if (overrides.rope_scaling_json) c.rope_scaling = parse_rope_scaling(*overrides.rope_scaling_json, "--rope-scaling");
  if (overrides.rope_theta) {
    CYPRIS_CHECK(*overrides.rope_theta > 0, "--rope-theta must be positive, got {}", *overrides.rope_theta);
    c.rope_theta = *overrides.rope_theta;
  }
  CYPRIS_CHECK(c.rope_theta > 0, "{}: rope_theta must be positive", source);
  const int64_t allowed = max_allowed_model_len(c);
  if (overrides.max_model_len) {
    const int64_t want = *overrides.max_model_len;
    CYPRIS_CHECK(want > 0, "--max-model-len must be positive, got {}", want);
    if (c.rope_scaling.type == "default") {
      if (want > c.max_position_embeddings) {
        // Automatic RoPE scaling: dynamic NTK (positions within the original length keep their
        // frequencies, later ones get a larger base), by the ratio of the lengths.
        CYPRIS_CHECK(want <= kMaxPositions, "--max-model-len {} exceeds the {} positions Cypris supports", want,
                     kMaxPositions);
        c.rope_scaling.type = "dynamic";
        c.rope_scaling.factor = static_cast<double>(want) / static_cast<double>(c.max_position_embeddings);
        LOG_INFO(
            "--max-model-len {} exceeds max_position_embeddings {} of {}: automatic RoPE scaling, dynamic NTK "
            "with factor {:.4g} (--rope-scaling sets another)",
            want, c.max_position_embeddings, source, c.rope_scaling.factor);
      }
    } else {
      CYPRIS_CHECK(want <= allowed, "--max-model-len {} exceeds {} = the longest context {} rope scaling of {} allows",
                   want, allowed, c.rope_scaling.type, source);
    }
    c.max_model_len = want;
  } else {
    c.max_model_len = c.max_position_embeddings;
  }
  if (overrides.disable_sliding_window) {
    int window = 0;
    for (int w : c.layer_sliding_window) {
      if (w > 0) window = window == 0 ? w : std::min(window, w);
    }
    if (window > 0) {
      CYPRIS_CHECK(!overrides.max_model_len || *overrides.max_model_len <= window,
                   "--max-model-len {} exceeds the sliding window {} of {}, to which --disable-sliding-window caps the "
                   "context",
                   *overrides.max_model_len, window, source);
      c.max_model_len = std::min<int64_t>(c.max_model_len, window);
      std::fill(c.layer_sliding_window.begin(), c.layer_sliding_window.end(), 0);
      LOG_INFO("--disable-sliding-window: the context of {} is capped at its sliding window, {} tokens", source,
               c.max_model_len);
    }
  }
  return c;
}

ModelConfig load_model_config(const ModelFamilies& families, const std::filesystem::path& dir,
                              const ConfigOverrides& overrides) {
  if (is_gguf_path(dir)) return gguf_model_config(families, GgufModel(dir), overrides);
  const auto path = dir / "config.json";
  CYPRIS_CHECK(std::filesystem::is_regular_file(path), "{} not found: --model must be a folder with a config.json",
               path.string());
  std::string gen;
  const auto gen_path = dir / "generation_config.json";
  if (std::filesystem::is_regular_file(gen_path)) gen = read_text(gen_path);
  return parse_model_config(families, read_text(path), path.string(), overrides, gen);
}

ModelConfig::ParameterCount ModelConfig::approx_parameters() const {
  const double h = static_cast<double>(hidden_size), d = static_cast<double>(head_dim);
  const double attention = h * d * (num_attention_heads + 2.0 * num_key_value_heads) + d * num_attention_heads * h;
  const double dense_mlp = 3.0 * h * static_cast<double>(intermediate_size);
  ParameterCount c;
  for (int l = 0; l < num_hidden_layers; ++l) {
    const bool moe = num_experts > 0 && (layer_is_moe.empty() || layer_is_moe[static_cast<size_t>(l)]);
    double total = attention + 2.0 * h, active = total;
    if (moe) {
      const double expert = 3.0 * h * static_cast<double>(moe_intermediate_size);
      // Qwen2-MoE's shared expert and its [1, hidden] gate.
      const double shared =
          shared_expert_intermediate_size > 0 ? 3.0 * h * static_cast<double>(shared_expert_intermediate_size) + h : 0.0;
      total += h * num_experts + num_experts * expert + shared;
      active += h * num_experts + num_experts_per_tok * expert + shared;
    } else {
      total += dense_mlp;
      active += dense_mlp;
    }
    c.total += total;
    c.active += active;
  }
  const double embeddings = static_cast<double>(vocab_size) * h * (tie_word_embeddings ? 1 : 2) + h;
  c.total += embeddings;
  c.active += embeddings;
  return c;
}

}  // namespace cypris
