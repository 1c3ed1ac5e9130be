// The sampler table (Aphrodite's sampler set: aphrodite-engine-options.txt "Sampler options" plus
// the samplers added after mid-2024 in sampler-notes.md), SamplerSettings and presets.
#include "app/ui/state/sampler_table.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>

#include "engine/common/error.h"
#include "engine/request/sampling_params.h"

namespace cypris {

using json = nlohmann::json;

namespace {

// The parameters a hobbyist reaches for first: shown together, open, above the full set.
const char* const kCommon[] = {"max_tokens", "temperature", "min_p", "top_p", "top_k", "repetition_penalty"};
// The chat's own default (the engine's 16 tokens is too short for a chat reply).
constexpr int64_t kChatMaxTokens = 512;

bool is_common(std::string_view name) {
  for (const char* c : kCommon) {
    if (name == c) return true;
  }
  return false;
}

// Defaults of the list-valued parameters (the descriptor table holds numbers only).
json list_default(const SamplingParamInfo& info) {
  const SamplingParams d;
  if (info.optional) return nullptr;
  if (info.name == "dry_sequence_breakers") return d.dry_sequence_breakers;
  return json::array();
}

SamplerSpec from_info(const SamplingParamInfo& info) {
  SamplerSpec s;
  s.key = std::string(info.name);
  s.label = s.key;
  s.group = is_common(info.name) ? "Common" : std::string(info.group);
  s.optional = info.optional;
  s.help = std::string(info.help);
  if (std::isfinite(info.min)) s.min = info.min;
  if (std::isfinite(info.max)) s.max = info.max;
  s.min_exclusive = info.min_exclusive;
  s.max_exclusive = info.max_exclusive;
  const bool unset = std::isnan(info.default_value);
  switch (info.kind) {
    case ParamKind::Float:
    case ParamKind::Int: {
      const bool is_int = info.kind == ParamKind::Int;
      s.type = is_int ? SamplerType::Int : SamplerType::Float;
      if (unset) {
        s.default_value = nullptr;
      } else if (is_int) {
        s.default_value = static_cast<int64_t>(info.default_value);
      } else {
        s.default_value = info.default_value;
      }
      // Slider ends inside the allowed range; exclusive ends moved in by one step.
      const double step = is_int ? 1.0 : 0.01;
      s.slider_min = std::isfinite(info.min) ? info.min + (info.min_exclusive ? step : 0.0) : -info.ui_max;
      s.slider_max = std::isfinite(info.max) ? std::min(info.max, info.ui_max) : info.ui_max;
      if (info.max_exclusive && std::isfinite(info.max) && s.slider_max >= info.max) s.slider_max = info.max - step;
      if (s.key == "mirostat_mode") {
        // Only 0 (off) and 2 (Mirostat 2.0) exist.
        s.type = SamplerType::Choice;
        s.choices = {"0", "2"};
      }
      break;
    }
    case ParamKind::Bool:
      s.type = SamplerType::Bool;
      s.default_value = info.default_value != 0.0;
      break;
    case ParamKind::EarlyStopping:
      s.type = SamplerType::Choice;
      s.choices = {"false", "true", "never"};
      s.default_value = "false";
      break;
    case ParamKind::IntList:
      s.type = SamplerType::IntList;
      s.default_value = list_default(info);
      break;
    case ParamKind::StringList:
      s.type = SamplerType::StringList;
      s.default_value = list_default(info);
      break;
    case ParamKind::TokenBiasMap:
      s.type = SamplerType::TokenBias;
      s.default_value = nullptr;
      break;
    case ParamKind::SamplerOrder:
      s.type = SamplerType::SamplerOrder;
      s.default_value = nullptr;
      break;
  }
  if (s.key == "max_tokens") s.default_value = kChatMaxTokens;
  std::string range = info.range_text();
  if (!range.empty() && (info.kind == ParamKind::Float || info.kind == ParamKind::Int))
    s.help += " Allowed: " + range + ".";
  return s;
}

std::vector<SamplerSpec> build() {
  std::vector<SamplerSpec> common, rest;
  for (const auto& info : sampling_param_table()) {
    SamplerSpec s = from_info(info);
    (s.group == "Common" ? common : rest).push_back(std::move(s));
  }
  // Common ones in kCommon's order.
  std::vector<SamplerSpec> out;
  for (const char* c : kCommon) {
    for (auto& s : common) {
      if (s.key == c) out.push_back(s);
    }
  }
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

std::string where_key(const std::string& where, const std::string& key) {
  return where + ": '" + key + "'";
}

json checked(const SamplerSpec& s, const json& v, const std::string& where) {
  const std::string at = where_key(where, s.key);
  if (v.is_null()) {
    CYPRIS_CHECK(s.optional, "{}: needs a value", at);
    return v;
  }
  auto check_range = [&](double x) {
    CYPRIS_CHECK(std::isfinite(x), "{}: {} is not a finite number", at, x);
    if (s.min) {
      bool ok = s.min_exclusive ? x > *s.min : x >= *s.min;
      CYPRIS_CHECK(ok, "{}: {} is too small (must be {} {})", at, x, s.min_exclusive ? ">" : ">=", *s.min);
    }
    if (s.max) {
      bool ok = s.max_exclusive ? x < *s.max : x <= *s.max;
      CYPRIS_CHECK(ok, "{}: {} is too large (must be {} {})", at, x, s.max_exclusive ? "<" : "<=", *s.max);
    }
  };
  switch (s.type) {
    case SamplerType::Float:
      CYPRIS_CHECK(v.is_number(), "{}: expected a number, got {}", at, v.dump());
      check_range(v.get<double>());
      return v.get<double>();
    case SamplerType::Int: {
      CYPRIS_CHECK(v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
                   "{}: expected a whole number, got {}", at, v.dump());
      auto x = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
      check_range(static_cast<double>(x));
      return x;
    }
    case SamplerType::Bool:
      CYPRIS_CHECK(v.is_boolean(), "{}: expected true or false, got {}", at, v.dump());
      return v;
    case SamplerType::Choice: {
      std::string text = v.is_string() ? v.get<std::string>() : v.dump();
      CYPRIS_CHECK(std::find(s.choices.begin(), s.choices.end(), text) != s.choices.end(),
                   "{}: {} is not allowed (choose one of: {})", at, v.dump(), fmt::join(s.choices, ", "));
      return s.default_value.is_number() ? json(std::stoll(text)) : json(text);
    }
    case SamplerType::StringList:
    case SamplerType::SamplerOrder: {
      CYPRIS_CHECK(v.is_array(), "{}: expected a list of strings, got {}", at, v.dump());
      std::vector<std::string> items;
      for (const auto& e : v) {
        CYPRIS_CHECK(e.is_string(), "{}: expected a list of strings, got {}", at, v.dump());
        items.push_back(e.get<std::string>());
      }
      if (s.type == SamplerType::SamplerOrder) {
        try {
          parse_sampler_priority(std::span<const std::string>(items));
        } catch (const std::exception& e) {
          CYPRIS_FAIL("{}: {}", at, e.what());
        }
      }
      return v;
    }
    case SamplerType::IntList:
      CYPRIS_CHECK(v.is_array(), "{}: expected a list of token ids, got {}", at, v.dump());
      for (const auto& e : v) {
        CYPRIS_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0, "{}: expected a list of token ids, got {}", at,
                     v.dump());
      }
      return v;
    case SamplerType::TokenBias: {
      CYPRIS_CHECK(v.is_object(), "{}: expected an object of token id to bias, got {}", at, v.dump());
      for (const auto& [k, b] : v.items()) {
        CYPRIS_CHECK(!k.empty() && k.find_first_not_of("0123456789") == std::string::npos, "{}: '{}' is not a token id",
                     at, k);
        CYPRIS_CHECK(b.is_number() && b.get<double>() >= -100 && b.get<double>() <= 100,
                     "{}: bias {} for token {} is out of range (-100 to 100)", at, b.dump(), k);
      }
      return v;
    }
  }
  return v;
}

}  // namespace

const std::vector<SamplerSpec>& sampler_table() {
  static const std::vector<SamplerSpec> table = build();
  return table;
}

const std::vector<std::string>& sampler_groups() {
  static const std::vector<std::string> groups = [] {
    std::vector<std::string> g;
    for (const auto& s : sampler_table()) {
      if (std::find(g.begin(), g.end(), s.group) == g.end()) g.push_back(s.group);
    }
    return g;
  }();
  return groups;
}

const SamplerSpec* find_sampler(const std::string& key) {
  for (const auto& s : sampler_table()) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

SamplerSettings::SamplerSettings() {
  reset_all();
}

const json& SamplerSettings::get(const std::string& key) const {
  auto it = values_.find(key);
  CYPRIS_CHECK(it != values_.end(), "unknown sampler parameter '{}'", key);
  return it->second;
}

void SamplerSettings::set(const std::string& key, const json& value, const std::string& where) {
  const SamplerSpec* s = find_sampler(key);
  CYPRIS_CHECK(s, "{}: unknown sampler parameter '{}'", where, key);
  values_[key] = checked(*s, value, where);
}

void SamplerSettings::reset(const std::string& key) {
  const SamplerSpec* s = find_sampler(key);
  CYPRIS_CHECK(s, "unknown sampler parameter '{}'", key);
  values_[key] = s->default_value;
}

void SamplerSettings::reset_all() {
  values_.clear();
  for (const auto& s : sampler_table()) values_[s.key] = s.default_value;
}

bool SamplerSettings::is_default(const std::string& key) const {
  const SamplerSpec* s = find_sampler(key);
  return s && get(key) == s->default_value;
}

json SamplerSettings::to_request_json() const {
  json j = json::object();
  for (const auto& s : sampler_table()) {
    const json& v = get(s.key);
    if (s.key == "max_tokens" || v != s.default_value) {
      if (v.is_null()) continue;                              // unset: the engine decides
      if (s.key == "seed" && v.get<int64_t>() < 0) continue;  // random
      if (s.key == "early_stopping") {
        const std::string e = v.get<std::string>();
        j[s.key] = e == "never" ? json("never") : json(e == "true");
        continue;
      }
      j[s.key] = v;
    }
  }
  return j;
}

void SamplerSettings::apply_preset(const json& preset, const std::string& where) {
  CYPRIS_CHECK(preset.is_object(), "{}: a sampler preset is a JSON object with \"name\" and \"values\"", where);
  const json values = preset.contains("values") ? preset.at("values") : json::object();
  CYPRIS_CHECK(values.is_object(), "{}: \"values\" must be an object of sampler parameters", where);
  SamplerSettings next;  // keys not given keep their default
  for (const auto& [k, v] : values.items()) next.set(k, v, where);
  next.structured_ = structured_;
  if (auto it = preset.find("structured_output"); it != preset.end()) {
    next.structured_ = StructuredOutput::from_json(*it, where);
  }
  *this = next;
}

json SamplerSettings::to_preset(const std::string& name, const std::string& description) const {
  json values = json::object();
  for (const auto& s : sampler_table()) {
    if (!is_default(s.key)) values[s.key] = get(s.key);
  }
  return json{
      {"name", name}, {"description", description}, {"values", values}, {"structured_output", structured_.to_json()}};
}

SamplerPreset read_sampler_preset(const std::string& path) {
  std::ifstream in(path);
  CYPRIS_CHECK(in.good(), "{}: cannot open sampler preset", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    CYPRIS_FAIL("{}: not valid JSON: {}", path, e.what());
  }
  SamplerSettings probe;
  probe.apply_preset(j, path);  // validates
  SamplerPreset p;
  p.name = j.value("name", std::filesystem::path(path).stem().string());
  p.description = j.value("description", "");
  p.path = path;
  p.json = j;
  return p;
}

std::vector<SamplerPreset> load_sampler_presets(const std::string& dir, std::vector<std::string>* errors) {
  std::vector<SamplerPreset> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".json") paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    try {
      out.push_back(read_sampler_preset(p));
    } catch (const std::exception& ex) {
      if (errors) errors->push_back(ex.what());
    }
  }
  return out;
}

void save_sampler_preset(const std::string& path, const SamplerSettings& s, const std::string& name,
                         const std::string& description) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path);
  CYPRIS_CHECK(out.good(), "{}: cannot write sampler preset", path);
  out << s.to_preset(name, description).dump(2) << "\n";
  CYPRIS_CHECK(out.good(), "{}: write failed", path);
}

}  // namespace cypris
