// The Engine options panel's model: a working copy of EngineConfig edited option by option (each
// value type- and range-checked by the option table, errors kept per field), the whole-config
// validation (validate_options on a copy, so invalid combinations are flagged before loading),
// and option profiles saved/loaded as JSON.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/config/options.h"

namespace cypris {

class OptionsForm {
 public:
  explicit OptionsForm(EngineConfig initial = {});

  const EngineConfig& config() const { return cfg_; }
  void replace(const EngineConfig& cfg);  // clears field errors

  // The options the panel shows, per group (the app's own --no-ui/--config are left out).
  static std::vector<const OptionSpec*> options_in(const std::string& group);
  static std::vector<std::string> groups();  // groups with at least one shown option

  // The Advanced view: "Common options" first (the options most users change, in that order),
  // then each group of the table with its other options, those that work before those not
  // supported yet. Options without effect in Cypris (NoEffect) are left out unless show_no_effect
  // or set to something other than their default (so a profile's leftover can be seen and reset).
  struct Section {
    std::string title;
    std::vector<const OptionSpec*> options;
  };
  std::vector<Section> advanced_sections(bool show_no_effect) const;
  static const std::vector<std::string>& common_option_names();  // those the table has
  static size_t no_effect_count();                               // options advanced_sections(false) leaves out

  nlohmann::json value(const OptionSpec& s) const { return s.binding.get(cfg_); }
  bool is_default(const OptionSpec& s) const { return value(s) == s.default_value(); }

  // Sets an option from a JSON value. On a bad value the config is unchanged, the error is kept
  // for the field (field_error) and false is returned.
  bool set_value(const std::string& key, const nlohmann::json& v);
  // Sets an option from text, as typed in a text field: strings as-is (empty = unset for optional
  // ones), lists comma separated, numbers parsed.
  bool set_text(const std::string& key, const std::string& text);
  // The text shown in a text field for the option.
  std::string text(const OptionSpec& s) const;
  void reset(const std::string& key);
  void reset_all();
  std::optional<std::string> field_error(const std::string& key) const;
  size_t changed_count() const;

  struct Validation {
    bool ok = true;
    std::string error;                  // the first problem (when !ok)
    std::vector<std::string> warnings;  // options that have no effect, etc.
  };
  // validate_options on a copy of the config, plus the field errors still pending. Cached until
  // the next change.
  const Validation& validate() const;

  // Profiles hold every option (options_to_json), so a profile loads the same on a later version
  // whose defaults changed.
  void save_profile(const std::string& path) const;
  // Loads into a copy and replaces the form only when the whole file is valid; throws Error
  // naming the file and key otherwise (the form is unchanged).
  void load_profile(const std::string& path);

 private:
  void changed();
  EngineConfig cfg_;
  std::map<std::string, std::string> field_errors_;
  mutable std::optional<Validation> validation_;
};

// Profile files (*.json) in a folder, names without the extension, sorted.
std::vector<std::string> list_profiles(const std::string& dir);

}  // namespace cypris
