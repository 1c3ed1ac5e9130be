// QuickOptions; see quick_options.h.
#include "app/ui/state/quick_options.h"

#include "engine/common/error.h"

namespace cypris {

using json = nlohmann::json;

const OptionSpec* QuickOptions::gpu_layers_option() {
  return find_option("gpu-layers");
}

std::optional<int> QuickOptions::gpu_layers() const {
  const OptionSpec* s = gpu_layers_option();
  if (!s) return std::nullopt;
  const json v = form_.value(*s);
  if (v.is_number()) return std::max(-1, v.get<int>());
  if (v.is_string()) {
    const std::string t = v.get<std::string>();
    if (t.empty() || t == "auto") return -1;
    try {
      return std::max(-1, std::stoi(t));
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;  // unset: auto
}

bool QuickOptions::set_gpu_layers(int n) {
  const OptionSpec* s = gpu_layers_option();
  CYPRIS_CHECK(s, "this build's engine has no --gpu-layers option");
  const std::string key = s->key();
  if (n >= 0) {
    if (s->binding.type == OptionType::String) return form_.set_value(key, std::to_string(n));
    return form_.set_value(key, int64_t{n});
  }
  if (s->binding.type == OptionType::String) return form_.set_value(key, "auto");
  if (s->binding.nullable && s->min && *s->min >= 0) return form_.set_value(key, nullptr);
  return form_.set_value(key, int64_t{-1});
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
  // Without the gpu-layers option the engine puts every layer on the device it runs on.
  c.gpu_layers = gpu_layers().value_or(c.use_gpu ? 1 << 30 : 0);
  c.gpu_memory_utilization = cfg.cache.gpu_memory_utilization;
  c.cpu_kvcache_space_gib = cfg.cache.cpu_kvcache_space;
  c.max_num_seqs = cfg.scheduler.max_num_seqs;
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

}  // namespace cypris
