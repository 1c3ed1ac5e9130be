#include "engine/loader/lora_adapter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/loader/gguf.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/torch_checkpoint.h"

namespace cypris {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxConfigBytes = size_t{1} << 20;
const std::string kPrefix = "base_model.model.";

json read_config(const std::filesystem::path& p) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(p, ec);
  CYPRIS_CHECK(!ec, "{}: cannot read the adapter's config ({})", p.string(), ec.message());
  CYPRIS_CHECK(size <= kMaxConfigBytes, "{}: {} bytes, more than an adapter config may have ({})", p.string(), size,
               kMaxConfigBytes);
  std::ifstream in(p, std::ios::binary);
  CYPRIS_CHECK(in.good(), "{}: cannot open the file", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json j = json::parse(ss.str());
    CYPRIS_CHECK(j.is_object(), "{}: not a JSON object", p.string());
    return j;
  } catch (const json::exception& e) {
    CYPRIS_FAIL("{}: not valid JSON ({})", p.string(), e.what());
  }
}

// True when the field is absent, null, false, an empty list/object/string or "none".
bool unset(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (it->is_boolean()) return !it->get<bool>();
  if (it->is_array() || it->is_object()) return it->empty();
  if (it->is_string()) return it->get<std::string>().empty() || it->get<std::string>() == "none";
  return false;
}

// The tensors of the adapter file: name -> (tensor), the file kept open by the returned holder.
struct AdapterFile {
  std::unique_ptr<SafetensorsFile> st;
  std::unique_ptr<TorchFile> pt;
  std::filesystem::path path;
  const std::map<std::string, SafetensorsTensor>& tensors() const { return st ? st->tensors() : pt->tensors(); }
};

AdapterFile open_adapter_file(const std::filesystem::path& dir) {
  AdapterFile f;
  std::error_code ec;
  if (std::filesystem::exists(dir / "adapter_model.safetensors", ec)) {
    f.path = dir / "adapter_model.safetensors";
    f.st = std::make_unique<SafetensorsFile>(f.path);
  } else if (std::filesystem::exists(dir / "adapter_model.bin", ec)) {
    f.path = dir / "adapter_model.bin";
    f.pt = std::make_unique<TorchFile>(f.path);  // refuses pickles that would run code, by name
  } else {
    CYPRIS_FAIL("{}: no adapter_model.safetensors or adapter_model.bin (a PEFT adapter folder holds one)",
                dir.string());
  }
  return f;
}

HostTensor to_f32(const SafetensorsTensor& t, const std::string& file) {
  CYPRIS_CHECK(t.dtype && (*t.dtype == DType::F32 || *t.dtype == DType::F16 || *t.dtype == DType::BF16),
               "{}: tensor '{}' is {}; LoRA weights must be F32, F16 or BF16", file, t.name, t.dtype_name);
  CYPRIS_CHECK(t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0,
               "{}: tensor '{}' has shape {}; LoRA A and B are matrices", file, t.name, fmt::join(t.shape, "x"));
  HostTensor h;
  h.dtype = DType::F32;
  h.shape = t.shape;
  h.buffer = Buffer(static_cast<size_t>(t.numel()) * sizeof(float));
  convert_elements(t.data, *t.dtype, h.buffer.data(), DType::F32, t.numel());
  return h;
}

}  // namespace

float lora_scale(double alpha, int64_t rank, bool use_rslora) {
  const double r = static_cast<double>(rank);
  return static_cast<float>(use_rslora ? alpha / std::sqrt(r) : alpha / r);
}

size_t LoraAdapter::nbytes() const {
  size_t n = 0;
  for (const auto& [name, m] : modules) n += m.a.buffer.size() + m.b.buffer.size();
  return n;
}

LoraAdapter load_lora_adapter(const std::filesystem::path& dir, int64_t max_rank) {
  std::error_code ec;
  CYPRIS_CHECK(!dir.empty(), "a LoRA adapter path must not be empty");
  if (is_gguf_path(dir)) return load_gguf_lora_adapter(dir, max_rank);
  CYPRIS_CHECK(std::filesystem::is_directory(dir, ec),
               "{}: not a folder; a LoRA adapter is a PEFT folder with adapter_config.json and "
               "adapter_model.safetensors",
               dir.string());
  const std::filesystem::path cfg_path = dir / "adapter_config.json";
  CYPRIS_CHECK(std::filesystem::exists(cfg_path, ec), "{}: no adapter_config.json (a PEFT LoRA adapter folder has one)",
               dir.string());
  const json cfg = read_config(cfg_path);
  const std::string where = cfg_path.string();

  LoraAdapter a;
  a.path = dir.string();
  if (auto it = cfg.find("peft_type"); it != cfg.end() && !it->is_null()) {
    CYPRIS_CHECK(it->is_string() && it->get<std::string>() == "LORA", "{}: peft_type {} is not supported (only LORA)",
                 where, it->dump());
  }
  auto r = cfg.find("r");
  CYPRIS_CHECK(r != cfg.end() && r->is_number_integer(), "{}: 'r' (the LoRA rank) must be an integer", where);
  a.rank = r->get<int64_t>();
  CYPRIS_CHECK(a.rank >= 1, "{}: 'r' {} must be at least 1", where, a.rank);
  CYPRIS_CHECK(a.rank <= max_rank, "{}: rank {} is above --max-lora-rank {}; raise --max-lora-rank (8 to 256)", where,
               a.rank, max_rank);
  a.alpha = 8.0;  // PEFT's default
  if (auto it = cfg.find("lora_alpha"); it != cfg.end() && !it->is_null()) {
    CYPRIS_CHECK(it->is_number() && std::isfinite(it->get<double>()), "{}: 'lora_alpha' must be a number", where);
    a.alpha = it->get<double>();
  }
  if (auto it = cfg.find("use_rslora"); it != cfg.end() && !it->is_null()) {
    CYPRIS_CHECK(it->is_boolean(), "{}: 'use_rslora' must be true or false", where);
    a.use_rslora = it->get<bool>();
  }
  a.scale = lora_scale(a.alpha, a.rank, a.use_rslora);
  if (auto it = cfg.find("base_model_name_or_path"); it != cfg.end() && it->is_string()) {
    a.base_model = it->get<std::string>();
  }
  // What would change the model in ways the A/B products do not express.
  CYPRIS_CHECK(unset(cfg, "modules_to_save"),
               "{}: modules_to_save {} is not supported: Cypris applies LoRA to the attention and MLP projections "
               "only, not to fully trained embeddings or LM heads",
               where, cfg["modules_to_save"].dump());
  CYPRIS_CHECK(unset(cfg, "use_dora"), "{}: use_dora (DoRA adapters) is not supported", where);
  CYPRIS_CHECK(unset(cfg, "fan_in_fan_out"), "{}: fan_in_fan_out (GPT-2 style Conv1D layers) is not supported",
               where);
  CYPRIS_CHECK(unset(cfg, "bias"), "{}: bias {} (trained biases) is not supported; only bias \"none\"", where,
               cfg.contains("bias") ? cfg["bias"].dump() : "");
  CYPRIS_CHECK(unset(cfg, "rank_pattern") && unset(cfg, "alpha_pattern"),
               "{}: rank_pattern / alpha_pattern (per-module ranks) are not supported yet", where);
  CYPRIS_CHECK(unset(cfg, "layer_replication"), "{}: layer_replication is not supported", where);

  const AdapterFile file = open_adapter_file(dir);
  const std::string fname = file.path.string();
  struct Pair {
    const SafetensorsTensor* a = nullptr;
    const SafetensorsTensor* b = nullptr;
  };
  std::map<std::string, Pair> pairs;
  for (const auto& [key, t] : file.tensors()) {
    CYPRIS_CHECK(key.rfind(kPrefix, 0) == 0, "{}: tensor '{}' does not start with '{}' (not a PEFT LoRA key)", fname,
                 key, kPrefix);
    CYPRIS_CHECK(key.find("lora_embedding_") == std::string::npos,
                 "{}: '{}' is LoRA on an embedding, which is not supported (only linear projections)", fname, key);
    CYPRIS_CHECK(key.find("lora_magnitude_vector") == std::string::npos,
                 "{}: '{}' belongs to a DoRA adapter, which is not supported", fname, key);
    const std::string rest = key.substr(kPrefix.size());
    bool is_a = false;
    std::string module;
    for (const char* suffix : {".lora_A.weight", ".lora_B.weight"}) {
      const std::string s = suffix;
      if (rest.size() > s.size() && rest.ends_with(s)) {
        module = rest.substr(0, rest.size() - s.size());
        is_a = s == ".lora_A.weight";
      }
    }
    CYPRIS_CHECK(!module.empty(),
                 "{}: tensor '{}' is not a LoRA A or B weight (a module saved whole, as modules_to_save or a trained "
                 "bias writes it, is not supported)",
                 fname, key);
    (is_a ? pairs[module].a : pairs[module].b) = &t;
  }
  CYPRIS_CHECK(!pairs.empty(), "{}: the adapter holds no lora_A / lora_B weights", fname);
  for (const auto& [module, p] : pairs) {
    CYPRIS_CHECK(p.a && p.b, "{}: module '{}' has lora_{} but no lora_{}", fname, module, p.a ? "A" : "B",
                 p.a ? "B" : "A");
    LoraModule m{to_f32(*p.a, fname), to_f32(*p.b, fname)};
    CYPRIS_CHECK(m.a.shape[0] == a.rank && m.b.shape[1] == a.rank,
                 "{}: module '{}': lora_A {} and lora_B {} do not have rank r = {} (A is [r, in], B is [out, r])",
                 fname, module, fmt::join(m.a.shape, "x"), fmt::join(m.b.shape, "x"), a.rank);
    a.modules.emplace(module, std::move(m));
  }
  return a;
}

}  // namespace cypris
