#include "engine/runtime/kv_cache_scales.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/loader/weights.h"

namespace cypris {
namespace {

float check_scale(double v, const std::string& where) {
  CYPRIS_CHECK(std::isfinite(v) && v > 0.0 && v < 3.0e38, "{} = {}: a KV cache scale must be a positive finite number",
               where, v);
  return static_cast<float>(v);
}

// A scalar scale tensor: vLLM's fp8 checkpoints store it with shape [] (some tools write [1]).
float read_scale_tensor(const WeightSource& w, const std::string& name) {
  float v = 0.0f;
  try {
    w.read_into(name, {}, DType::F32, ShardSpec::replicated(), &v);
  } catch (const Error&) {
    w.read_into(name, {1}, DType::F32, ShardSpec::replicated(), &v);
  }
  return check_scale(v, w.describe() + ": tensor " + name);
}

// Checkpoint scales, or an empty vector when the checkpoint has none.
std::vector<KvCacheScales> checkpoint_scales(const WeightSource& w, int num_layers) {
  std::vector<KvCacheScales> out(static_cast<size_t>(num_layers));
  bool any = false;
  for (int i = 0; i < num_layers; ++i) {
    for (const char* prefix : {"self_attn.", "self_attn.attn."}) {
      const std::string base = "model.layers." + std::to_string(i) + "." + prefix;
      if (w.contains(base + "k_scale")) {
        out[i].k = read_scale_tensor(w, base + "k_scale");
        any = true;
      }
      if (w.contains(base + "v_scale")) {
        out[i].v = read_scale_tensor(w, base + "v_scale");
        any = true;
      }
    }
  }
  if (!any) out.clear();
  return out;
}

}  // namespace

std::vector<KvCacheScales> load_kv_scales_json(const std::string& path, DType cache_dtype, int num_layers,
                                               int tp_rank) {
  using nlohmann::json;
  std::ifstream f(path);
  CYPRIS_CHECK(f.good(), "--quantization-param-path {}: cannot open the file", path);
  std::stringstream ss;
  ss << f.rdbuf();
  json doc;
  try {
    doc = json::parse(ss.str());
  } catch (const json::exception& e) {
    CYPRIS_FAIL("--quantization-param-path {}: not valid JSON ({})", path, e.what());
  }
  CYPRIS_CHECK(doc.is_object() && doc.contains("kv_cache") && doc["kv_cache"].is_object(),
               "--quantization-param-path {}: needs an object \"kv_cache\" with \"dtype\" and \"scaling_factor\" "
               "(vLLM's format)",
               path);
  const json& kv = doc["kv_cache"];
  if (kv.contains("dtype")) {
    CYPRIS_CHECK(kv["dtype"].is_string() && (kv["dtype"] == "float8_e4m3fn" || kv["dtype"] == "float8_e5m2"),
                 "--quantization-param-path {}: kv_cache.dtype is {}; allowed: \"float8_e4m3fn\", \"float8_e5m2\"",
                 path, kv["dtype"].dump());
    const std::string want = cache_dtype == DType::F8E5M2 ? "float8_e5m2" : "float8_e4m3fn";
    if (kv["dtype"] != want) {
      LOG_WARN(
          "--quantization-param-path {}: kv_cache.dtype {} was computed for another fp8 format than the cache's "
          "({}); using the scales anyway",
          path, kv["dtype"].get<std::string>(), want);
    }
  }
  CYPRIS_CHECK(
      kv.contains("scaling_factor") && kv["scaling_factor"].is_object(),
      "--quantization-param-path {}: kv_cache.scaling_factor must be an object {{\"<tp rank>\": {{\"<layer>\": "
      "scale, ...}}}}",
      path);
  const std::string rank_key = std::to_string(tp_rank);
  const json& by_rank = kv["scaling_factor"];
  CYPRIS_CHECK(by_rank.contains(rank_key) && by_rank[rank_key].is_object(),
               "--quantization-param-path {}: kv_cache.scaling_factor has no object for tensor-parallel rank {}", path,
               rank_key);
  const json& layers = by_rank[rank_key];
  std::vector<KvCacheScales> out(static_cast<size_t>(num_layers));
  for (int i = 0; i < num_layers; ++i) {
    const std::string field = fmt::format("kv_cache.scaling_factor.{}.{}", rank_key, i);
    const std::string key = std::to_string(i);
    CYPRIS_CHECK(layers.contains(key), "--quantization-param-path {}: {} is missing (the model has {} layers)", path,
                 field, num_layers);
    CYPRIS_CHECK(layers[key].is_number(), "--quantization-param-path {}: {} must be a number, got {}", path, field,
                 layers[key].dump());
    const float s = check_scale(layers[key].get<double>(), "--quantization-param-path " + path + ": " + field);
    out[i] = {s, s};  // vLLM's file has one factor per layer for both K and V
  }
  return out;
}

ResolvedKvScales resolve_kv_cache_scales(DType cache_dtype, const WeightSource* checkpoint,
                                         const std::string& param_path, int num_layers, int tp_rank) {
  ResolvedKvScales r;
  if (cache_dtype != DType::F8E4M3 && cache_dtype != DType::F8E5M2) {
    r.layers.assign(static_cast<size_t>(num_layers), KvCacheScales{});
    r.source = fmt::format("none ({} cache)", dtype_name(cache_dtype));
    return r;
  }
  if (checkpoint) r.layers = checkpoint_scales(*checkpoint, num_layers);
  if (!r.layers.empty()) {
    r.source = "the checkpoint's k_scale/v_scale tensors";
    if (!param_path.empty()) {
      LOG_WARN("--quantization-param-path {} is ignored: the checkpoint has its own KV cache scales", param_path);
    }
    return r;
  }
  if (!param_path.empty()) {
    r.layers = load_kv_scales_json(param_path, cache_dtype, num_layers, tp_rank);
    r.source = param_path;
    return r;
  }
  r.layers.assign(static_cast<size_t>(num_layers), KvCacheScales{});
  r.source = "default 1.0 (no scales in the checkpoint and no --quantization-param-path)";
  return r;
}

}  // namespace cypris
