// The option table: one OptionSpec per engine/server option (flags, type, default, choices or
// range, help, group, env var, support status). CLI parsing, --help, --help-json, validation,
// YAML/JSON config files, JSON save/load and the UI options panel are generated from it.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/engine_config.h"

namespace cypris {

enum class OptionType { Bool, Int, Float, String, StringList };

// Options kept for compatibility with Aphrodite scripts are either honoured, accepted with a
// warning (no meaning in one native process), or rejected until the feature exists.
enum class OptionSupport { Supported, NoEffect, NotYet };

struct OptionBinding {
  OptionType type = OptionType::String;
  bool nullable = false;  // std::optional field: may be unset (JSON null)
  std::function<nlohmann::json(const EngineConfig&)> get;
  std::function<void(EngineConfig&, const nlohmann::json&)> set;  // value already validated
};

struct OptionSpec {
  std::string name;                  // long flag without dashes: "tensor-parallel-size"
  std::vector<std::string> aliases;  // further spellings with dashes: "-tp", "--preemption_mode"
  std::string group;
  std::string metavar;
  std::string help;
  std::vector<std::string> choices;  // known values (strings, or ints written as strings)
  // Known choices Cypris refuses (also in `choices`), each with the reason the error gives.
  std::vector<std::pair<std::string, std::string>> refused;
  std::optional<double> min, max;
  bool min_exclusive = false;
  bool json_object = false;  // a String holding a JSON object
  std::string env;           // environment variable mirroring this option
  OptionSupport support = OptionSupport::Supported;
  std::string note;  // what Cypris does instead (NoEffect) or which feature is missing (NotYet)
  OptionBinding binding;

  std::string flag() const { return "--" + name; }
  // The reason a choice is refused, or nullptr when it is accepted.
  const std::string* refusal(const std::string& choice) const;
  std::string key() const;  // name with '_' for '-': the JSON / YAML key
  nlohmann::json default_value() const;
};

// All engine, server and app options, in --help order.
const std::vector<OptionSpec>& option_table();
const std::vector<std::string>& option_groups();
const OptionSpec* find_option(const std::string& flag_or_key);

// A binding for an option that lives outside EngineConfig (a subcommand's own flag).
template <typename T>
OptionBinding bind_external(T* target);

// A subcommand's own option, bound to *target (parsed alongside the table by parse_options).
template <typename T>
OptionSpec external_option(std::string group, std::string name, T* target, std::string metavar, std::string help) {
  OptionSpec s;
  s.group = std::move(group);
  s.name = std::move(name);
  s.binding = bind_external(target);
  s.metavar = std::move(metavar);
  s.help = std::move(help);
  return s;
}

struct ParseResult {
  std::vector<std::string> positional;  // arguments that are not options
  std::set<std::string> explicit_keys;  // keys set by the CLI, a config file or the environment
  std::vector<std::string> warnings;    // accepted-but-no-effect options etc.
  bool help = false;
  bool help_json = false;
  bool help_markdown = false;  // the README's option reference
  bool version = false;
};

// Parses the environment mirrors, then --config FILE (YAML or JSON), then the command line,
// into cfg (later sources win). extra: a subcommand's own options, parsed alongside. Throws
// cypris::Error naming the flag (or file and key) and what is allowed.
ParseResult parse_options(const std::vector<std::string>& args, EngineConfig& cfg,
                          const std::vector<OptionSpec>& extra = {}, bool read_environment = true);

// Checks ranges, choices and cross-option rules; NotYet options that differ from their default
// are errors; NoEffect ones that differ from their default or were given (explicit_keys, from
// ParseResult) add a warning "has no effect in Cypris". Throws cypris::Error on the first problem.
std::vector<std::string> validate_options(const EngineConfig& cfg, const std::set<std::string>& explicit_keys = {});

// Sets one option from a JSON value (type- and range-checked); `where` names the source.
void set_option(EngineConfig& cfg, const OptionSpec& spec, const nlohmann::json& value, const std::string& where);
// Parses a command-line string for the option's type.
nlohmann::json parse_option_text(const OptionSpec& spec, const std::string& text, const std::string& where);

// JSON save/load: keys are OptionSpec::key(); load rejects unknown keys (with a suggestion).
nlohmann::json options_to_json(const EngineConfig& cfg, bool only_changed = false);
void options_from_json(const nlohmann::json& j, EngineConfig& cfg, const std::string& source,
                       std::set<std::string>* explicit_keys = nullptr);
void load_options_file(const std::string& path, EngineConfig& cfg, std::set<std::string>* explicit_keys = nullptr);
// The same for options already read (source names them in errors): JSON when the text starts with
// '{', else YAML; YAML that expands past 10000 values or 32 levels is refused.
void load_options_text(const std::string& text, const std::string& source, EngineConfig& cfg,
                       std::set<std::string>* explicit_keys = nullptr);
void save_options_file(const std::string& path, const EngineConfig& cfg);

std::string help_text(const std::string& usage, const std::vector<OptionSpec>& extra = {});
nlohmann::json help_json(const std::vector<OptionSpec>& extra = {});
std::string option_reference_markdown();  // the README's option reference

// "unknown option '--x'; did you mean '--y'?" (empty when nothing is close)
std::string closest_option(const std::string& flag, const std::vector<OptionSpec>& extra = {});

// ---- implementation of the template above ----
namespace detail {
nlohmann::json to_json_value(const bool& v);
nlohmann::json to_json_value(const int64_t& v);
nlohmann::json to_json_value(const double& v);
nlohmann::json to_json_value(const std::string& v);
nlohmann::json to_json_value(const std::vector<std::string>& v);
template <typename T>
nlohmann::json to_json_value(const std::optional<T>& v) {
  return v ? to_json_value(*v) : nlohmann::json(nullptr);
}
template <typename T>
void from_json_value(const nlohmann::json& j, T& out) {
  out = j.get<T>();
}
template <typename T>
void from_json_value(const nlohmann::json& j, std::optional<T>& out) {
  if (j.is_null()) {
    out.reset();
  } else {
    out = j.get<T>();
  }
}
template <typename T>
struct TypeOf;
template <> struct TypeOf<bool> { static constexpr OptionType kType = OptionType::Bool; };
template <> struct TypeOf<int64_t> { static constexpr OptionType kType = OptionType::Int; };
template <> struct TypeOf<double> { static constexpr OptionType kType = OptionType::Float; };
template <> struct TypeOf<std::string> { static constexpr OptionType kType = OptionType::String; };
template <> struct TypeOf<std::vector<std::string>> { static constexpr OptionType kType = OptionType::StringList; };
template <typename T>
struct Unopt {
  using type = T;
  static constexpr bool kNullable = false;
};
template <typename T>
struct Unopt<std::optional<T>> {
  using type = T;
  static constexpr bool kNullable = true;
};

template <typename F>
OptionBinding bind_field(F field) {
  using P = std::remove_pointer_t<decltype(field(std::declval<EngineConfig&>()))>;
  OptionBinding b;
  b.type = TypeOf<typename Unopt<P>::type>::kType;
  b.nullable = Unopt<P>::kNullable;
  b.get = [field](const EngineConfig& c) { return to_json_value(*field(const_cast<EngineConfig&>(c))); };
  b.set = [field](EngineConfig& c, const nlohmann::json& v) { from_json_value(v, *field(c)); };
  return b;
}
}  // namespace detail

template <typename T>
OptionBinding bind_external(T* target) {
  return detail::bind_field([target](EngineConfig&) { return target; });
}

}  // namespace cypris
