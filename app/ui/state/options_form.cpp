// OptionsForm; see options_form.h.
#include "app/ui/state/options_form.h"

#include <algorithm>
#include <filesystem>

#include "engine/common/error.h"

namespace cypris {

using json = nlohmann::json;

namespace {

bool shown_in_form(const OptionSpec& s) {
  return s.name != "no-ui" && s.name != "config";
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

}  // namespace

OptionsForm::OptionsForm(EngineConfig initial) : cfg_(std::move(initial)) {}

void OptionsForm::replace(const EngineConfig& cfg) {
  cfg_ = cfg;
  field_errors_.clear();
  changed();
}

std::vector<const OptionSpec*> OptionsForm::options_in(const std::string& group) {
  std::vector<const OptionSpec*> out;
  for (const auto& s : option_table()) {
    if (s.group == group && shown_in_form(s)) out.push_back(&s);
  }
  return out;
}

std::vector<std::string> OptionsForm::groups() {
  std::vector<std::string> out;
  for (const auto& g : option_groups()) {
    if (!options_in(g).empty()) out.push_back(g);
  }
  return out;
}

const std::vector<std::string>& OptionsForm::common_option_names() {
  static const std::vector<std::string> names = [] {
    // gpu-layers is looked up by name: it is listed when the engine's table has it.
    const char* wanted[] = {"model",
                            "gguf-file",
                            "max-model-len",
                            "gpu-layers",
                            "dtype",
                            "quantization",
                            "kv-cache-dtype",
                            "device",
                            "tensor-parallel-size",
                            "gpu-memory-utilization",
                            "cpu-kvcache-space",
                            "threads",
                            "max-num-seqs",
                            "enable-prefix-caching",
                            "served-model-name",
                            "host",
                            "port",
                            "api-keys"};
    std::vector<std::string> out;
    for (const char* w : wanted) {
      const OptionSpec* s = find_option(w);
      if (s && shown_in_form(*s)) out.push_back(s->name);
    }
    return out;
  }();
  return names;
}

std::vector<OptionsForm::Section> OptionsForm::advanced_sections(bool show_no_effect) const {
  std::vector<Section> out;
  const auto& common = common_option_names();
  Section first{"Common options", {}};
  for (const auto& n : common) first.options.push_back(find_option(n));
  out.push_back(std::move(first));
  for (const auto& g : groups()) {
    Section sec{g, {}};
    std::vector<const OptionSpec*> not_yet, no_effect;
    for (const OptionSpec* s : options_in(g)) {
      if (std::find(common.begin(), common.end(), s->name) != common.end()) continue;
      if (s->support == OptionSupport::NoEffect) {
        if (show_no_effect || !is_default(*s)) no_effect.push_back(s);
      } else if (s->support == OptionSupport::NotYet) {
        not_yet.push_back(s);
      } else {
        sec.options.push_back(s);
      }
    }
    sec.options.insert(sec.options.end(), not_yet.begin(), not_yet.end());
    sec.options.insert(sec.options.end(), no_effect.begin(), no_effect.end());
    if (!sec.options.empty()) out.push_back(std::move(sec));
  }
  return out;
}

size_t OptionsForm::no_effect_count() {
  size_t n = 0;
  for (const auto& s : option_table()) {
    if (shown_in_form(s) && s.support == OptionSupport::NoEffect) ++n;
  }
  return n;
}

bool OptionsForm::set_value(const std::string& key, const json& v) {
  const OptionSpec* s = find_option(key);
  CYPRIS_CHECK(s, "unknown option '{}'", key);
  try {
    EngineConfig next = cfg_;
    set_option(next, *s, v, "options panel");
    cfg_ = std::move(next);
    field_errors_.erase(s->key());
    changed();
    return true;
  } catch (const std::exception& e) {
    field_errors_[s->key()] = e.what();
    changed();
    return false;
  }
}

bool OptionsForm::set_text(const std::string& key, const std::string& text) {
  const OptionSpec* s = find_option(key);
  CYPRIS_CHECK(s, "unknown option '{}'", key);
  const std::string t = trim(text);
  try {
    json v;
    if (s->binding.type == OptionType::StringList) {
      v = json::array();
      size_t start = 0;
      while (start <= t.size()) {
        size_t comma = t.find(',', start);
        std::string item = trim(t.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (!item.empty()) v.push_back(item);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (t.empty() && s->binding.nullable) {
      v = nullptr;
    } else if (s->binding.type == OptionType::String) {
      v = text;  // keep the spaces the user typed in a string value
    } else {
      v = parse_option_text(*s, t, "options panel: " + s->flag());
    }
    return set_value(key, v);
  } catch (const std::exception& e) {
    field_errors_[s->key()] = e.what();
    changed();
    return false;
  }
}

std::string OptionsForm::text(const OptionSpec& s) const {
  json v = value(s);
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const auto& e : v) {
      if (!out.empty()) out += ", ";
      out += e.is_string() ? e.get<std::string>() : e.dump();
    }
    return out;
  }
  return v.dump();
}

void OptionsForm::reset(const std::string& key) {
  const OptionSpec* s = find_option(key);
  CYPRIS_CHECK(s, "unknown option '{}'", key);
  s->binding.set(cfg_, s->default_value());
  field_errors_.erase(s->key());
  changed();
}

void OptionsForm::reset_all() {
  replace(EngineConfig{});
}

std::optional<std::string> OptionsForm::field_error(const std::string& key) const {
  auto it = field_errors_.find(key);
  if (it == field_errors_.end()) return std::nullopt;
  return it->second;
}

size_t OptionsForm::changed_count() const {
  size_t n = 0;
  for (const auto& s : option_table()) {
    if (shown_in_form(s) && !is_default(s)) ++n;
  }
  return n;
}

const OptionsForm::Validation& OptionsForm::validate() const {
  if (validation_) return *validation_;
  Validation v;
  if (!field_errors_.empty()) {
    v.ok = false;
    v.error = field_errors_.begin()->second;
  } else {
    try {
      EngineConfig copy = cfg_;
      v.warnings = validate_options(copy);
      if (copy.model.model.empty()) {
        v.ok = false;
        v.error = "choose a model first: a Hugging Face repo or a local folder (--model)";
      }
    } catch (const std::exception& e) {
      v.ok = false;
      v.error = e.what();
    }
  }
  validation_ = std::move(v);
  return *validation_;
}

void OptionsForm::save_profile(const std::string& path) const {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  save_options_file(path, cfg_);
}

void OptionsForm::load_profile(const std::string& path) {
  EngineConfig next;  // a profile is complete: start from the defaults
  load_options_file(path, next);
  replace(next);
}

void OptionsForm::changed() {
  validation_.reset();
}

std::vector<std::string> list_profiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cypris
