// QuickOptions; see quick_options.h.
#include "app/ui/state/quick_options.h"

#include <algorithm>
#include <filesystem>

#include "app/ui/state/gguf_choice.h"
#include "engine/common/error.h"

namespace cypris {

using json = nlohmann::json;

const OptionSpec* QuickOptions::gpu_layers_option() {
  return find_option("gpu-layers");
}

int QuickOptions::gpu_layers_from_value(const json& v) {
  if (v.is_null()) return kGpuLayersUnset;
  if (v.is_number_integer()) return static_cast<int>(std::clamp<int64_t>(v.get<int64_t>(), -1, 1 << 20));
  if (v.is_string()) {
    const std::string t = v.get<std::string>();
    if (t.empty()) return kGpuLayersUnset;
    if (t == "auto") return -1;
    try {
      return std::clamp(std::stoi(t), -1, 1 << 20);
    } catch (const std::exception&) {
      return -1;
    }
  }
  return kGpuLayersUnset;
}

json QuickOptions::gpu_layers_value(const OptionSpec& s, int n) {
  if (n <= kGpuLayersUnset) return s.binding.nullable ? json(nullptr) : s.default_value();
  if (s.binding.type == OptionType::String) return n < 0 ? json("auto") : json(std::to_string(n));
  return json(int64_t{std::max(n, -1)});
}

std::optional<int> QuickOptions::gpu_layers() const {
  const OptionSpec* s = gpu_layers_option();
  if (!s) return std::nullopt;
  return gpu_layers_from_value(form_.value(*s));
}

bool QuickOptions::set_gpu_layers(int n) {
  const OptionSpec* s = gpu_layers_option();
  CYPRIS_CHECK(s, "this build's engine has no --gpu-layers option");
  return form_.set_value(s->key(), gpu_layers_value(*s, n));
}

int64_t QuickOptions::context() const {
  return form_.config().model.max_model_len.value_or(0);
}

bool QuickOptions::set_context(int64_t n) {
  return n > 0 ? form_.set_value("max-model-len", n) : form_.set_value("max-model-len", nullptr);
}

const ModelFootprint* QuickOptions::footprint() {
  const ModelOptions& mo = form_.config().model;
  const std::string key = mo.model + '\n' + mo.gguf_file.value_or("") + '\n' + mo.revision.value_or("") + '\n' +
                          mo.download_dir.value_or("");
  if (key != key_) {
    key_ = key;
    footprint_.reset();
    footprint_error_.clear();
    try {
      footprint_ = read_model_footprint(find_local_model(mo));
    } catch (const std::exception& e) {
      footprint_error_ = e.what();
    }
  }
  return footprint_ ? &*footprint_ : nullptr;
}

const std::string& QuickOptions::footprint_error() {
  footprint();
  return footprint_error_;
}

void QuickOptions::refresh_machine(bool query_gpu) {
  machine_ = read_machine_memory(query_gpu);
}

MemoryChoice QuickOptions::choice() const {
  const EngineConfig& cfg = form_.config();
  MemoryChoice c;
  c.dtype = cfg.model.dtype;
  c.kv_cache_dtype = cfg.quant.kv_cache_dtype;
  c.context = cfg.model.max_model_len.value_or(0);
  c.use_gpu = cfg.device.device != "cpu" && machine_.gpu.has_value();
  // Unset (or without the gpu-layers option) the engine puts every layer on the device it runs on.
  const int gl = gpu_layers().value_or(kGpuLayersUnset);
  c.gpu_layers = gl == kGpuLayersUnset ? (c.use_gpu ? 1 << 30 : 0) : gl;
  c.gpu_memory_utilization = cfg.cache.gpu_memory_utilization;
  c.cpu_kvcache_space_gib = cfg.cache.cpu_kvcache_space;
  c.max_num_seqs = cfg.scheduler.max_num_seqs;
  c.tensor_parallel_size = static_cast<int>(cfg.parallel.tensor_parallel_size);
  c.cpu_offload_gb = cfg.cache.cpu_offload_gb;
  return c;
}

std::optional<MemoryEstimate> QuickOptions::estimate() {
  estimate_error_.clear();
  const ModelFootprint* fp = footprint();
  if (!fp) return std::nullopt;
  try {
    return estimate_memory(*fp, choice(), machine_);
  } catch (const std::exception& e) {
    estimate_error_ = e.what();
    return std::nullopt;
  }
}

std::string folder_weight_label(const std::string& dir) {
  try {
    return weight_type_label(dir);
  } catch (const std::exception&) {
  }
  std::vector<std::string> quants;
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    if (name.size() <= 5 || name.compare(name.size() - 5, 5, ".gguf") != 0) continue;
    const std::string q = gguf_quant_from_name(name);
    if (!q.empty() && std::find(quants.begin(), quants.end(), q) == quants.end()) quants.push_back(q);
  }
  if (quants.empty()) return "?";
  std::string out = "GGUF";
  for (size_t i = 0; i < quants.size() && i < 3; ++i) out += (i ? ", " : " ") + quants[i];
  if (quants.size() > 3) out += ", ...";
  return out;
}

}  // namespace cypris
