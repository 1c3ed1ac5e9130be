// A model family's part in reading a model: the config.json fields and defaults it has beyond those
// every family shares (model_config.cpp reads those), and the GGUF architectures it reads with their
// quirks. Each family is described next to its model file (models/*.cpp) and listed, one row per
// Hugging Face `architectures` name, by models/registry (model_families()); the engine and the runtime
// hand that list to the readers here. The loader names no family itself: it sits under models/ and
// may not include it (docs/architecture.md, "Where to add things").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cypris {

class GgufModel;
struct ModelConfig;

// Checked access to config.json's fields (absent and null are the same, as HF writes null for unset
// values); errors name the source and the field.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& j, const std::string& source) : j_(j), source_(source) {}
  const std::string& source() const { return source_; }
  const nlohmann::json& json() const { return j_; }
  bool has(const char* key) const;
  int64_t get_int(const char* key, std::optional<int64_t> def = {}) const;  // no default: required
  double get_double(const char* key, std::optional<double> def = {}) const;
  std::optional<double> get_opt_double(const char* key) const;
  bool get_bool(const char* key, bool def) const;
  std::string get_string(const char* key, const std::string& def) const;

 private:
  const nlohmann::json& j_;
  const std::string& source_;
};

// A Hugging Face tensor name inside a layer and its GGUF name ("input_layernorm.weight" ->
// "attn_norm.weight").
struct GgufNameMap {
  std::string_view hf;
  std::string_view gguf;
};

// Whether a GGUF architecture's files have routed experts ({arch}.expert_count).
enum class GgufExperts { None, Optional, Required };

// How one GGUF architecture ("general.architecture") maps to a Cypris model; a family lists its rows.
// The metadata keys are "{gguf_arch}.{key}" as llama.cpp writes them.
struct GgufArchitecture {
  std::string_view gguf_arch;        // "llama", "qwen2", ...
  std::string_view hf_architecture;  // the registry name: "LlamaForCausalLM"
  std::string_view model_type;       // config.json model_type
  bool qkv_bias = false;             // the q/k/v projections have biases
  // llama.cpp's converter reorders q/k rows for its interleaved rotary layout on these
  // architectures; Cypris (like HF) rotates the two halves of each head (neox), so the rows are put back.
  bool permuted_qk = false;
  // Gemma: llama.cpp's converter stores every *norm.weight with Gemma's "1 +" folded in (the reader
  // takes it out again).
  bool gemma_norms = false;
  // config.json fields the file does not carry because llama.cpp fixes them for this architecture
  // (a JSON object merged over what the metadata gives), e.g. Gemma 3's sliding-window pattern.
  std::string_view fixed_config = "{}";
  GgufExperts experts = GgufExperts::None;
  // Layer tensor names of this architecture, looked up before the common ones (gguf_weights.cpp).
  std::span<const GgufNameMap> layer_names = {};
  // Fields derived from the file after the common keys are read (e.g. Gemma's query scale).
  void (*adjust)(const GgufModel& file, nlohmann::json& config) = nullptr;
};

struct ModelFamily {
  std::string_view name;         // "gemma", for messages
  bool tied_embeddings = false;  // tie_word_embeddings' default (true in Gemma's and Cohere's configs)
  bool gelu_is_tanh = false;     // hidden_act "gelu" is the tanh approximation (Gemma, as transformers)
  // Which layers slide when config.json sets sliding_window but no layer_types; null: every layer.
  void (*sliding_layers)(const ConfigFields& f, ModelConfig& c, int window) = nullptr;
  // The family's own fields and defaults, read after the shared ones (experts included).
  void (*read_config)(const ConfigFields& f, ModelConfig& c) = nullptr;
  std::vector<GgufArchitecture> gguf;  // the GGUF architectures whose files are this family's
};

// A Hugging Face `architectures` name and the family whose config it has (models/registry's rows).
struct ArchitectureFamily {
  std::string_view architecture;
  const ModelFamily* family = nullptr;
};
using ModelFamilies = std::vector<ArchitectureFamily>;

// The family of the first name in `architectures` that `families` lists; nullptr when none (the config
// is read with the shared fields; building the model then fails in models/registry, naming it).
const ModelFamily* find_family(const ModelFamilies& families, const std::vector<std::string>& architectures);

// The GGUF row for general.architecture `gguf_arch`, nullptr when no family reads it.
const GgufArchitecture* find_gguf_architecture(const ModelFamilies& families, std::string_view gguf_arch);

}  // namespace cypris
