#include "engine/loader/model_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
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
  if (v.is_number_integer()) {
    ids.push_back(v.get<int32_t>());
  } else {
    CYPRIS_CHECK(v.is_array(), "{}: field '{}' must be an integer or a list of integers", source, key);
    for (const auto& e : v) {
      CYPRIS_CHECK(e.is_number_integer(), "{}: field '{}' must hold integers, got {}", source, key, e.dump());
      ids.push_back(e.get<int32_t>());
    }
  }
  return ids;
}

RopeScaling rope_scaling_from_json(const json& r, const std::string& source) {
  CYPRIS_CHECK(r.is_object(), "{}: rope_scaling must be a JSON object, got {}", source, r.dump());
  const std::string src = source + ": rope_scaling";
  RopeScaling rs;
  rs.type = get_string(r, "rope_type", src, get_string(r, "type", src, "default"));
  if (rs.type == "mrope") rs.type = "default";  // same frequencies; the sections only matter for vision models
  const bool known =
      rs.type == "default" || rs.type == "linear" || rs.type == "dynamic" || rs.type == "yarn" || rs.type == "llama3";
  CYPRIS_CHECK(known, "{}: rope_type '{}' is not supported; supported: default, linear, dynamic, yarn, llama3", src,
               rs.type);
  if (rs.type != "default") {
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
  if (rs.type == "linear" || rs.type == "dynamic") return static_cast<int64_t>(max_pos * rs.factor);
  if (rs.type == "yarn" || rs.type == "llama3") {
    const double original = rs.original_max_position_embeddings.value_or(max_pos);
    return static_cast<int64_t>(std::max(max_pos, original * rs.factor));
  }
  return cfg.max_position_embeddings;
}

ModelConfig parse_model_config(const std::string& config_json, const std::string& source,
                               const ConfigOverrides& overrides, const std::string& generation_json) {
  const json j = parse_json(config_json, source);
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
  c.model_type = get_string(j, "model_type", source, "");
  c.hidden_size = get_int(j, "hidden_size", source);
  c.intermediate_size = get_int(j, "intermediate_size", source);
  c.num_hidden_layers = static_cast<int>(get_int(j, "num_hidden_layers", source));
  c.num_attention_heads = static_cast<int>(get_int(j, "num_attention_heads", source));
  c.num_key_value_heads = static_cast<int>(get_int(j, "num_key_value_heads", source, c.num_attention_heads));
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
  CYPRIS_CHECK(c.max_position_embeddings > 0, "{}: max_position_embeddings must be positive", source);
  if (has(j, "head_dim")) {
    c.head_dim = static_cast<int>(get_int(j, "head_dim", source));
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
  const std::string act = get_string(j, "hidden_act", source, "silu");
  CYPRIS_CHECK(act == "silu" || act == "swish", "{}: hidden_act '{}' is not supported (silu)", source, act);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, false);
  c.torch_dtype = get_string(j, "torch_dtype", source, get_string(j, "dtype", source, ""));

  const bool is_qwen2 = c.model_type == "qwen2" || c.architectures.front() == "Qwen2ForCausalLM";
  if (is_qwen2) {
    c.qkv_bias = true;  // Qwen2 always has q/k/v biases and none on o_proj
  } else {
    c.qkv_bias = c.o_bias = get_bool(j, "attention_bias", source, false);
  }
  c.mlp_bias = get_bool(j, "mlp_bias", source, false);

  // Sliding window per layer. Explicit layer_types win; else Qwen2 slides only when
  // use_sliding_window and from max_window_layers on (as transformers does); Mistral slides everywhere.
  c.layer_sliding_window.assign(c.num_hidden_layers, 0);
  int window = 0;
  if (has(j, "sliding_window")) {
    window = static_cast<int>(get_int(j, "sliding_window", source));
    CYPRIS_CHECK(window > 0, "{}: sliding_window must be positive or null, got {}", source, window);
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
    if (is_qwen2) {
      const bool use = get_bool(j, "use_sliding_window", source, false);
      const int max_window_layers = static_cast<int>(get_int(j, "max_window_layers", source, c.num_hidden_layers));
      for (int i = 0; i < c.num_hidden_layers; ++i) {
        if (use && i >= max_window_layers) c.layer_sliding_window[i] = window;
      }
    } else {
      c.layer_sliding_window.assign(c.num_hidden_layers, window);
    }
  }

  if (has(j, "bos_token_id")) c.bos_token_id = static_cast<int32_t>(get_int(j, "bos_token_id", source));
  c.eos_token_ids = get_id_list(j, "eos_token_id", source);
  if (!generation_json.empty()) {
    const std::string gsrc = (std::filesystem::path(source).parent_path() / "generation_config.json").string();
    const json g = parse_json(generation_json, gsrc);
    if (has(g, "bos_token_id")) c.bos_token_id = static_cast<int32_t>(get_int(g, "bos_token_id", gsrc));
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
      CYPRIS_CHECK(want <= c.max_position_embeddings,
                   "--max-model-len {} exceeds max_position_embeddings {} of {}; a longer context needs rope scaling "
                   "(--rope-scaling '{{\"rope_type\":\"dynamic\",\"factor\":2.0}}' or the model's own)",
                   want, c.max_position_embeddings, source);
    } else {
      CYPRIS_CHECK(want <= allowed, "--max-model-len {} exceeds {} = the longest context {} rope scaling of {} allows",
                   want, allowed, c.rope_scaling.type, source);
    }
    c.max_model_len = want;
  } else {
    c.max_model_len = c.max_position_embeddings;
  }
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir, const ConfigOverrides& overrides) {
  if (is_gguf_path(dir)) return gguf_model_config(GgufModel(dir), overrides);
  const auto path = dir / "config.json";
  CYPRIS_CHECK(std::filesystem::is_regular_file(path), "{} not found: --model must be a folder with a config.json",
               path.string());
  std::string gen;
  const auto gen_path = dir / "generation_config.json";
  if (std::filesystem::is_regular_file(gen_path)) gen = read_text(gen_path);
  return parse_model_config(read_text(path), path.string(), overrides, gen);
}

}  // namespace cypris
