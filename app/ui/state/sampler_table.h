// The chat's sampler controls: every per-request sampling parameter (name as in the API request
// body, type, default, slider range, hard limits, help, group), generated from SamplingParams'
// descriptor table (engine/request/sampling_params.h, sampling_param_table()) plus the few choices
// only the UI makes (the chat's max_tokens default, slider ends); the current values; and presets
// (resources/sampler_presets/*.json).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/ui/state/structured_output.h"

namespace cypris {

enum class SamplerType { Float, Int, Bool, Choice, StringList, IntList, TokenBias, SamplerOrder };

struct SamplerSpec {
  std::string key;    // request field: "temperature"
  std::string label;  // "Temperature"
  std::string group;  // "Basic", "Penalties", "DRY", ...
  SamplerType type = SamplerType::Float;
  nlohmann::json default_value;               // null: unset by default (optional parameters)
  bool optional = false;                      // may be unset (null): the panel shows an on/off box
  double slider_min = 0.0, slider_max = 1.0;  // the slider's range (Ctrl+click types any valid value)
  std::optional<double> min, max;             // hard limits checked on load
  bool min_exclusive = false;
  bool max_exclusive = false;
  std::vector<std::string> choices;  // Choice: allowed values (ints written as strings)
  std::string help;
};

const std::vector<SamplerSpec>& sampler_table();
const std::vector<std::string>& sampler_groups();  // in table order
const SamplerSpec* find_sampler(const std::string& key);

// The current values of every sampler parameter.
class SamplerSettings {
 public:
  SamplerSettings();  // all defaults

  const nlohmann::json& get(const std::string& key) const;  // throws Error for an unknown key
  // Checks type and limits; throws cypris::Error naming `where` and the key.
  void set(const std::string& key, const nlohmann::json& value, const std::string& where = "sampler");
  void reset(const std::string& key);
  void reset_all();
  bool is_default(const std::string& key) const;

  // The request JSON for AppServices::generate: every value that differs from the engine's default
  // (unset optional values are left out), plus max_tokens always (the engine's default of 16 is too
  // short for a chat, so the chat's default is 512).
  nlohmann::json to_request_json() const;

  // The structured-output field (a grammar for the reply). Not a sampler parameter: reset_all()
  // leaves it, and to_request_json() does not add it (ChatSession adds it once it compiles).
  StructuredOutput& structured() { return structured_; }
  const StructuredOutput& structured() const { return structured_; }

  // Presets: {"name": ..., "description": ..., "values": {key: value, ...}, "structured_output":
  // {"mode": ..., "text": ...}}; keys not given keep their default. A preset without
  // "structured_output" (the shipped ones) leaves the field as it is; saved presets always have it.
  // Loading checks every key and value and throws Error naming the file and key.
  void apply_preset(const nlohmann::json& preset, const std::string& where);
  nlohmann::json to_preset(const std::string& name, const std::string& description = "") const;

 private:
  std::map<std::string, nlohmann::json> values_;
  StructuredOutput structured_;
};

struct SamplerPreset {
  std::string name;
  std::string description;
  std::string path;
  nlohmann::json json;
};

// The presets in a folder (*.json, sorted by name). Files that do not parse are skipped and
// reported in `errors` ("file: message").
std::vector<SamplerPreset> load_sampler_presets(const std::string& dir, std::vector<std::string>* errors = nullptr);
SamplerPreset read_sampler_preset(const std::string& path);  // throws Error
void save_sampler_preset(const std::string& path, const SamplerSettings& s, const std::string& name,
                         const std::string& description = "");

}  // namespace cypris
