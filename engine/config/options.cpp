#include "engine/config/options.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/common/error.h"

namespace cypris {

using nlohmann::json;

namespace detail {
json to_json_value(const bool& v) { return v; }
json to_json_value(const int64_t& v) { return v; }
json to_json_value(const double& v) { return v; }
json to_json_value(const std::string& v) { return v; }
json to_json_value(const std::vector<std::string>& v) { return v; }
}  // namespace detail

std::string OptionSpec::key() const {
  std::string k = name;
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

const std::string* OptionSpec::refusal(const std::string& choice) const {
  for (const auto& [value, reason] : refused) {
    if (value == choice) return &reason;
  }
  return nullptr;
}

json OptionSpec::default_value() const {
  EngineConfig defaults;
  return binding.get(defaults);
}

namespace {

std::string normalise_key(std::string s) {
  while (!s.empty() && s.front() == '-') s.erase(s.begin());
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

const OptionSpec* find_in(const std::vector<OptionSpec>& specs, const std::string& flag_or_key) {
  const std::string n = normalise_key(flag_or_key);
  for (const auto& s : specs) {
    if (s.name == n) return &s;
    for (const auto& a : s.aliases) {
      if (a == flag_or_key || normalise_key(a) == n) return &s;
    }
  }
  return nullptr;
}

const OptionSpec* find_any(const std::string& flag, const std::vector<OptionSpec>& extra) {
  if (const OptionSpec* s = find_in(extra, flag)) return s;
  return find_in(option_table(), flag);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string type_name(OptionType t) {
  switch (t) {
    case OptionType::Bool: return "boolean";
    case OptionType::Int: return "integer";
    case OptionType::Float: return "number";
    case OptionType::String: return "string";
    case OptionType::StringList: return "list of strings";
  }
  return "?";
}

std::string format_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

std::string range_text(const OptionSpec& s) {
  if (!s.min && !s.max) return "";
  if (s.min && s.max) return fmt::format("{}{}, {}]", s.min_exclusive ? "(" : "[", format_number(*s.min),
                                         format_number(*s.max));
  if (s.min) return fmt::format("{} {}", s.min_exclusive ? ">" : ">=", format_number(*s.min));
  return fmt::format("<= {}", format_number(*s.max));
}

std::string value_text(const json& v) {
  if (v.is_null()) return "None";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_array()) {
    std::vector<std::string> parts;
    for (const auto& e : v) parts.push_back(value_text(e));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
  return v.dump();
}

// Checks type, choices and range of v for spec; returns the value converted to the field's
// type (e.g. 2 for a Float option becomes 2.0).
json checked_value(const OptionSpec& s, const json& v, const std::string& where) {
  if (v.is_null()) {
    CYPRIS_CHECK(s.binding.nullable, "{}: {} needs a value ({})", where, s.flag(), type_name(s.binding.type));
    return v;
  }
  json out;
  switch (s.binding.type) {
    case OptionType::Bool:
      CYPRIS_CHECK(v.is_boolean(), "{}: {} must be true or false, not {}", where, s.flag(), v.dump());
      out = v;
      break;
    case OptionType::Int:
      CYPRIS_CHECK(v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())),
                   "{}: {} must be an integer, not {}", where, s.flag(), v.dump());
      out = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
      break;
    case OptionType::Float:
      CYPRIS_CHECK(v.is_number() && std::isfinite(v.get<double>()), "{}: {} must be a number, not {}", where, s.flag(),
                   v.dump());
      out = v.get<double>();
      break;
    case OptionType::String:
      CYPRIS_CHECK(v.is_string() || (s.json_object && v.is_object()), "{}: {} must be a string, not {}", where,
                   s.flag(), v.dump());
      out = v.is_string() ? v : json(v.dump());
      break;
    case OptionType::StringList:
      if (v.is_string()) {
        out = json::array({v});
      } else {
        CYPRIS_CHECK(v.is_array(), "{}: {} must be a list of strings, not {}", where, s.flag(), v.dump());
        out = json::array();
        for (const auto& e : v) {
          CYPRIS_CHECK(e.is_string() || e.is_number(), "{}: {} must be a list of strings, not {}", where, s.flag(),
                       v.dump());
          out.push_back(e.is_string() ? e.get<std::string>() : e.dump());
        }
      }
      break;
  }
  if (!s.choices.empty()) {
    auto check_choice = [&](const json& e) {
      std::string text = e.is_string() ? e.get<std::string>() : e.dump();
      CYPRIS_CHECK(std::find(s.choices.begin(), s.choices.end(), text) != s.choices.end(),
                   "{}: {} does not accept '{}'; allowed: {}", where, s.flag(), text, fmt::join(s.choices, ", "));
      if (const std::string* why = s.refusal(text)) CYPRIS_FAIL("{}: {} {}: {}", where, s.flag(), text, *why);
    };
    if (out.is_array()) {
      for (const auto& e : out) check_choice(e);
    } else {
      check_choice(out);
    }
  }
  if (out.is_number() && (s.min || s.max)) {
    double x = out.get<double>();
    bool low = s.min && (s.min_exclusive ? x <= *s.min : x < *s.min);
    bool high = s.max && x > *s.max;
    CYPRIS_CHECK(!low && !high, "{}: {} = {} is out of range; allowed: {}", where, s.flag(), value_text(out),
                 range_text(s));
  }
  if (s.json_object && out.is_string() && !out.get<std::string>().empty()) {
    json parsed = json::parse(out.get<std::string>(), nullptr, false);
    CYPRIS_CHECK(!parsed.is_discarded() && parsed.is_object(), "{}: {} must be a JSON object such as {}, not '{}'",
                 where, s.flag(), R"({"type":"dynamic","factor":2.0})", out.get<std::string>());
  }
  return out;
}

bool parse_bool_text(const std::string& t, bool& out) {
  std::string l = t;
  std::transform(l.begin(), l.end(), l.begin(), ::tolower);
  if (l == "true" || l == "1" || l == "yes" || l == "on") {
    out = true;
    return true;
  }
  if (l == "false" || l == "0" || l == "no" || l == "off") {
    out = false;
    return true;
  }
  return false;
}

bool looks_like_flag(const std::string& a) {
  if (a.size() < 2 || a[0] != '-') return false;
  // Negative numbers are values, not flags.
  char c = a[1];
  return !(std::isdigit(static_cast<unsigned char>(c)) || c == '.');
}

// Options files are small: a file that expands past these (YAML aliases can repeat one node many
// times over, a "billion laughs" of 300 bytes became 86 MB; one 1 MB string referenced 5000 times
// became 4.6 GB) is refused instead of expanded. Values are counted, and so are the bytes of the
// text they expand to: at most the file's own size plus kMaxYamlExtraBytes.
constexpr size_t kMaxYamlValues = 10000;
constexpr size_t kMaxYamlExtraBytes = size_t{1} << 20;
constexpr int kMaxYamlDepth = 32;

struct YamlBudget {
  size_t values = kMaxYamlValues;
  size_t bytes = 0;   // left to expand
  size_t limit = 0;   // the bytes allowed in all (for the message)
};

void spend_yaml_bytes(YamlBudget& budget, size_t n, const std::string& source) {
  CYPRIS_CHECK(n <= budget.bytes,
               "{}: expands to more than {} bytes of text (YAML aliases repeat too much); options files are small",
               source, budget.limit);
  budget.bytes -= n;
}

json yaml_to_json(const YAML::Node& n, const std::string& source, YamlBudget& budget, int depth = 0) {
  CYPRIS_CHECK(budget.values > 0, "{}: more than {} values (YAML aliases expand to too much); options files are small",
               source, kMaxYamlValues);
  CYPRIS_CHECK(depth < kMaxYamlDepth, "{}: nested deeper than {} levels", source, kMaxYamlDepth);
  --budget.values;
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& e : n) a.push_back(yaml_to_json(e, source, budget, depth + 1));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) {
        CYPRIS_CHECK(kv.first.IsScalar(), "{}: option names must be plain words", source);
        spend_yaml_bytes(budget, kv.first.Scalar().size(), source);
        o[kv.first.Scalar()] = yaml_to_json(kv.second, source, budget, depth + 1);
      }
      return o;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      spend_yaml_bytes(budget, s.size(), source);
      if (n.Tag() == "!") return s;  // quoted: always a string
      bool b;
      if (s == "true" || s == "True" || s == "false" || s == "False") return parse_bool_text(s, b) && b;
      if (s == "null" || s == "~" || s == "None") return nullptr;
      char* end = nullptr;
      errno = 0;
      long long i = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0' && errno == 0) return static_cast<int64_t>(i);
      errno = 0;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0' && errno == 0) return d;
      return s;
    }
  }
  return nullptr;
}

}  // namespace

const OptionSpec* find_option(const std::string& flag_or_key) { return find_in(option_table(), flag_or_key); }

std::string closest_option(const std::string& flag, const std::vector<OptionSpec>& extra) {
  const std::string n = normalise_key(flag);
  std::string best;
  size_t best_d = SIZE_MAX;
  auto consider = [&](const OptionSpec& s) {
    size_t d = edit_distance(n, s.name);
    // A prefix ("--tensor-parallel") is a strong hint too.
    if (s.name.rfind(n, 0) == 0 && n.size() >= 4) d = std::min<size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = s.flag();
    }
  };
  for (const auto& s : extra) consider(s);
  for (const auto& s : option_table()) consider(s);
  size_t limit = std::max<size_t>(2, n.size() / 3);
  return best_d <= limit ? best : "";
}

json parse_option_text(const OptionSpec& s, const std::string& text, const std::string& where) {
  switch (s.binding.type) {
    case OptionType::Bool: {
      bool b;
      CYPRIS_CHECK(parse_bool_text(text, b), "{}: {} takes true or false, not '{}'", where, s.flag(), text);
      return b;
    }
    case OptionType::Int: {
      // An integer option whose range starts at -1 uses it for "auto" (--gpu-layers auto).
      if (text == "auto" && s.min && *s.min == -1.0) return int64_t{-1};
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(text.c_str(), &end, 10);
      CYPRIS_CHECK(!text.empty() && *end == '\0' && errno == 0, "{}: {} takes an integer, not '{}'", where, s.flag(),
                   text);
      return static_cast<int64_t>(v);
    }
    case OptionType::Float: {
      char* end = nullptr;
      errno = 0;
      double v = std::strtod(text.c_str(), &end);
      CYPRIS_CHECK(!text.empty() && *end == '\0' && errno == 0 && std::isfinite(v), "{}: {} takes a number, not '{}'",
                   where, s.flag(), text);
      return v;
    }
    case OptionType::String:
      // vLLM lists None among some choices (--quantization): it means unset.
      if (s.binding.nullable && (text == "None" || text == "null")) return nullptr;
      return text;
    case OptionType::StringList:
      if (!text.empty() && text.front() == '[') {
        json j = json::parse(text, nullptr, false);
        CYPRIS_CHECK(!j.is_discarded() && j.is_array(), "{}: {} takes a JSON list of strings, not '{}'", where,
                     s.flag(), text);
        return j;
      }
      return json::array({text});
  }
  return nullptr;
}

void set_option(EngineConfig& cfg, const OptionSpec& spec, const json& value, const std::string& where) {
  spec.binding.set(cfg, checked_value(spec, value, where));
}

ParseResult parse_options(const std::vector<std::string>& args, EngineConfig& cfg, const std::vector<OptionSpec>& extra,
                          bool read_environment) {
  ParseResult r;
  // 1. Environment mirrors.
  if (read_environment) {
    for (const auto& s : option_table()) {
      if (s.env.empty()) continue;
      if (const char* v = std::getenv(s.env.c_str()); v && *v) {
        set_option(cfg, s, parse_option_text(s, v, "environment variable " + s.env), "environment variable " + s.env);
        r.explicit_keys.insert(s.key());
      }
    }
  }
  // 2. --config FILE, read before the other flags so the command line wins.
  for (size_t i = 0; i < args.size(); ++i) {
    std::string path;
    if (args[i] == "--config" && i + 1 < args.size()) {
      path = args[i + 1];
    } else if (args[i].rfind("--config=", 0) == 0) {
      path = args[i].substr(9);
    }
    if (!path.empty()) {
      load_options_file(path, cfg, &r.explicit_keys);
      cfg.app.config = path;
    }
  }
  // 3. The command line. A list option given on the command line replaces the file's list;
  // repeating the flag appends.
  std::set<std::string> lists_seen;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      r.help = true;
      continue;
    }
    if (a == "--help-json") {
      r.help_json = true;
      continue;
    }
    if (a == "--help-markdown") {
      r.help_markdown = true;
      continue;
    }
    if (a == "--version" || a == "-V") {
      r.version = true;
      continue;
    }
    if (a == "--") {
      r.positional.insert(r.positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (!looks_like_flag(a)) {
      r.positional.push_back(a);
      continue;
    }
    std::string flag = a, inline_value;
    bool has_inline = false;
    if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      flag = a.substr(0, eq);
      inline_value = a.substr(eq + 1);
      has_inline = true;
    }
    const OptionSpec* s = find_any(flag, extra);
    // --no-NAME turns a boolean option off (vLLM's --no-enable-prefix-caching).
    if (!s && flag.rfind("--no-", 0) == 0 && !has_inline) {
      const OptionSpec* b = find_any("--" + flag.substr(5), extra);
      if (b && b->binding.type == OptionType::Bool) {
        set_option(cfg, *b, false, "command line");
        r.explicit_keys.insert(b->key());
        continue;
      }
    }
    if (!s) {
      std::string hint = closest_option(flag, extra);
      CYPRIS_FAIL("unknown option '{}'{}; see cypris --help", flag,
                  hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint));
    }
    const std::string where = "command line";
    json value;
    switch (s->binding.type) {
      case OptionType::Bool: {
        bool b = true;
        if (has_inline) {
          value = parse_option_text(*s, inline_value, where);
        } else if (i + 1 < args.size() && parse_bool_text(args[i + 1], b)) {
          value = b;
          ++i;
        } else {
          value = true;
        }
        break;
      }
      case OptionType::StringList: {
        json items = json::array();
        if (has_inline) {
          items = parse_option_text(*s, inline_value, where);
        } else {
          while (i + 1 < args.size() && !looks_like_flag(args[i + 1])) {
            for (const auto& e : parse_option_text(*s, args[++i], where)) items.push_back(e);
          }
          CYPRIS_CHECK(!items.empty(), "{}: {} needs at least one value", where, s->flag());
        }
        if (lists_seen.count(s->key())) {
          json merged = s->binding.get(cfg);
          for (const auto& e : items) merged.push_back(e);
          items = merged;
        }
        lists_seen.insert(s->key());
        value = items;
        break;
      }
      default:
        if (has_inline) {
          value = parse_option_text(*s, inline_value, where);
        } else {
          CYPRIS_CHECK(i + 1 < args.size(), "{}: {} needs a value ({})", where, s->flag(),
                       s->metavar.empty() ? type_name(s->binding.type) : s->metavar);
          value = parse_option_text(*s, args[++i], where);
        }
    }
    if (s->name == "config") continue;  // already read above
    set_option(cfg, *s, value, where);
    r.explicit_keys.insert(s->key());
  }
  return r;
}

std::vector<std::string> validate_options(const EngineConfig& cfg, const std::set<std::string>& explicit_keys) {
  std::vector<std::string> warnings;
  for (const auto& s : option_table()) {
    json v = s.binding.get(cfg);
    // Values set through the API (UI, JSON) get the same checks as the command line.
    checked_value(s, v, "option");
    const bool changed = v != s.default_value();
    if (s.support == OptionSupport::NotYet && changed) {
      CYPRIS_FAIL("{} = {}: {} is not supported yet in Cypris; leave it at its default ({})", s.flag(), value_text(v),
                  s.note, value_text(s.default_value()));
    }
    // A no-effect flag warns even when given at its default (--multi-step-stream-outputs true).
    if (s.support == OptionSupport::NoEffect && (changed || explicit_keys.count(s.key()))) {
      warnings.push_back(fmt::format("{} has no effect in Cypris: {}", s.flag(), s.note));
    }
  }
  if (cfg.quant.quantization) {
    const std::string& q = *cfg.quant.quantization;
    CYPRIS_CHECK(q == "gguf" || q == "gptq" || q == "gptq_marlin" || q == "marlin" || q == "awq" ||
                     q == "compressed-tensors" || q == "fp8" || q == "exl2" || q == "bitsandbytes" || q == "bnb",
                 "--quantization {}: not supported yet in Cypris; supported: gptq (also gptq_marlin; marlin for "
                 "Marlin-format GPTQ), awq, compressed-tensors (pack-quantized, int-quantized, float-quantized), fp8, "
                 "exl2, bitsandbytes (all read from the "
                 "checkpoint's quantization_config, so -q may be left out; -q fp8 on a 16-bit checkpoint quantizes it "
                 "at load) and gguf (a .gguf --model or --gguf-file NAME)",
                 q);
  }
  const bool swap_given = explicit_keys.count("swap_space") || cfg.cache.swap_space != CacheOptions{}.swap_space;
  if (swap_given && cfg.scheduler.preemption_mode.value_or("recompute") != "swap") {
    warnings.push_back(
        "--swap-space has no effect in Cypris with --preemption-mode recompute (the default): preempted requests are "
        "recomputed, nothing is swapped to the CPU; add --preemption-mode swap to use the swap space");
  }
  const auto& d = cfg.device.device;
  if (d == "neuron" || d == "tpu") {
    warnings.push_back(fmt::format("--device {} has no effect in Cypris: it runs on cuda or cpu; using auto", d));
  }
  if (cfg.cache.cpu_offload_gb > 0 && d == "cpu") {
    warnings.push_back(fmt::format("--cpu-offload-gb {} has no effect with --device cpu: the weights are already in "
                                   "host memory (it offloads a GPU's weights)",
                                   cfg.cache.cpu_offload_gb));
  }
  if (cfg.cache.cpu_offload_gb > 0 && cfg.device.gpu_layers && *cfg.device.gpu_layers == 0) {
    warnings.push_back(fmt::format("--cpu-offload-gb {} has no effect with --gpu-layers 0: no layer is on the GPU",
                                   cfg.cache.cpu_offload_gb));
  }
  CYPRIS_CHECK(!cfg.server.ssl_keyfile.has_value() == !cfg.server.ssl_certfile.has_value(),
               "--ssl-keyfile and --ssl-certfile must be given together");
  CYPRIS_CHECK(cfg.server.lora_modules.empty() || cfg.lora.enable_lora,
               "--lora-modules needs --enable-lora (adapters are only loaded with LoRA enabled)");
  CYPRIS_CHECK(!cfg.lora.qlora_adapter_name_or_path || cfg.lora.enable_lora,
               "--qlora-adapter-name-or-path needs --enable-lora (the adapter is served like --lora-modules)");
  CYPRIS_CHECK(!cfg.lora.max_cpu_loras || *cfg.lora.max_cpu_loras >= cfg.lora.max_loras,
               "--max-cpu-loras {} must be at least --max-loras {}", cfg.lora.max_cpu_loras.value_or(0),
               cfg.lora.max_loras);
  if (cfg.spec.ngram_prompt_lookup_min && cfg.spec.ngram_prompt_lookup_max) {
    CYPRIS_CHECK(*cfg.spec.ngram_prompt_lookup_min <= *cfg.spec.ngram_prompt_lookup_max,
                 "--ngram-prompt-lookup-min must not exceed --ngram-prompt-lookup-max");
  }
  if (cfg.scheduler.max_num_batched_tokens) {
    CYPRIS_CHECK(*cfg.scheduler.max_num_batched_tokens >= cfg.scheduler.max_num_seqs,
                 "--max-num-batched-tokens ({}) must be at least --max-num-seqs ({})",
                 *cfg.scheduler.max_num_batched_tokens, cfg.scheduler.max_num_seqs);
  }
  return warnings;
}

json options_to_json(const EngineConfig& cfg, bool only_changed) {
  json j = json::object();
  for (const auto& s : option_table()) {
    if (s.name == "config") continue;
    json v = s.binding.get(cfg);
    if (only_changed && v == s.default_value()) continue;
    j[s.key()] = v;
  }
  return j;
}

void options_from_json(const json& j, EngineConfig& cfg, const std::string& source, std::set<std::string>* keys) {
  CYPRIS_CHECK(j.is_object(), "{}: expected an object of option names to values", source);
  for (const auto& [k, v] : j.items()) {
    const OptionSpec* s = find_option(k);
    if (!s) {
      std::string hint = closest_option(k);
      CYPRIS_FAIL("{}: unknown option '{}'{}", source, k,
                  hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint.substr(2)));
    }
    if (s->name == "config") {
      if (keys) keys->insert(s->key());  // not followed, but the caller may want to refuse it
      continue;
    }
    set_option(cfg, *s, v, fmt::format("{}: key '{}'", source, k));
    if (keys) keys->insert(s->key());
  }
}

void load_options_file(const std::string& path, EngineConfig& cfg, std::set<std::string>* keys) {
  std::error_code ec;
  CYPRIS_CHECK(std::filesystem::is_regular_file(path, ec), "--config: '{}' is not a file (expected YAML or JSON options)",
               path);
  std::ifstream in(path);
  CYPRIS_CHECK(in.good(), "--config: cannot read '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  load_options_text(ss.str(), path, cfg, keys);
}

void load_options_text(const std::string& text, const std::string& source, EngineConfig& cfg,
                       std::set<std::string>* keys) {
  json j;
  std::string first;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      first = c;
      break;
    }
  }
  if (first == "{") {
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e400
      CYPRIS_FAIL("{}: not valid JSON: {}", source, e.what());
    }
  } else {
    try {
      YAML::Node n = YAML::Load(text);
      if (n.IsNull()) return;  // empty file: nothing to set
      CYPRIS_CHECK(n.IsMap(), "{}: expected a mapping of option names to values", source);
      YamlBudget budget;
      budget.limit = budget.bytes = text.size() + kMaxYamlExtraBytes;
      j = yaml_to_json(n, source, budget);
    } catch (const YAML::Exception& e) {
      CYPRIS_FAIL("{}: not valid YAML: line {}, column {}: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg);
    }
  }
  try {
    options_from_json(j, cfg, source, keys);
  } catch (const json::exception& e) {
    // Values that are not UTF-8 text (YAML passes any bytes through), found by the fuzz test.
    CYPRIS_FAIL("{}: an option's value cannot be read: {}", source, e.what());
  }
}

void save_options_file(const std::string& path, const EngineConfig& cfg) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    CYPRIS_CHECK(out.good(), "cannot write options to '{}'", path);
    out << options_to_json(cfg).dump(2) << "\n";
    CYPRIS_CHECK(out.good(), "cannot write options to '{}'", path);
  }
  CYPRIS_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot write options to '{}'", path);
}

namespace {

std::string wrap(const std::string& text, size_t indent, size_t width) {
  std::string out, line;
  std::istringstream words(text);
  std::string w;
  const std::string pad(indent, ' ');
  while (words >> w) {
    if (!line.empty() && line.size() + 1 + w.size() > width - indent) {
      out += pad + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  if (!line.empty()) out += pad + line + "\n";
  return out;
}

std::string flags_text(const OptionSpec& s) {
  std::string f = s.flag();
  for (const auto& a : s.aliases) {
    if (a.rfind("--", 0) != 0) f += " (" + a + ")";
  }
  if (s.binding.type != OptionType::Bool || !s.metavar.empty()) f += " " + (s.metavar.empty() ? "VALUE" : s.metavar);
  return f;
}

// " Refused: pt, npcache (reason); tensorizer (reason)." for the choices Cypris refuses.
std::string refused_text(const OptionSpec& s) {
  std::string out;
  for (size_t i = 0; i < s.refused.size();) {
    std::vector<std::string> same;
    size_t j = i;
    for (; j < s.refused.size() && s.refused[j].second == s.refused[i].second; ++j) same.push_back(s.refused[j].first);
    out += fmt::format("{}{} ({})", out.empty() ? " Refused: " : "; ", fmt::join(same, ", "), s.refused[i].second);
    i = j;
  }
  return out.empty() ? out : out + ".";
}

std::string details_text(const OptionSpec& s) {
  std::string d;
  json def = s.default_value();
  if (!def.is_null() && !(def.is_array() && def.empty()) && !(def.is_string() && def.get<std::string>().empty()) &&
      !(def.is_boolean() && !def.get<bool>())) {
    d += " Default: " + value_text(def) + ".";
  }
  std::string r = range_text(s);
  if (!r.empty()) d += " Range: " + r + ".";
  std::vector<std::string> long_aliases;
  for (const auto& a : s.aliases) {
    if (a.rfind("--", 0) == 0) long_aliases.push_back(a);
  }
  if (!long_aliases.empty()) d += fmt::format(" Also: {}.", fmt::join(long_aliases, ", "));
  if (!s.env.empty()) d += " Env: " + s.env + ".";
  if (s.binding.type == OptionType::Bool && def.is_boolean() && def.get<bool>()) d += " Off: --no-" + s.name + ".";
  d += refused_text(s);
  if (s.support == OptionSupport::NoEffect) d += " [warns: has no effect in Cypris: " + s.note + "]";
  if (s.support == OptionSupport::NotYet) d += " [refused: not supported yet: " + s.note + "]";
  return d;
}

}  // namespace

std::string help_text(const std::string& usage, const std::vector<OptionSpec>& extra) {
  std::string out = usage + "\n";
  out +=
      "\nEvery option works as described unless marked [warns: has no effect in Cypris] (accepted with a "
      "warning) or [refused: not supported yet] (an error unless left at its default); \"Refused:\" lists the "
      "choices that are errors, with the reason.\n";
  auto print_group = [&](const std::string& g, const std::vector<OptionSpec>& specs) {
    out += "\n" + g + ":\n";
    for (const auto& s : specs) {
      if (s.group != g) continue;
      out += "  " + flags_text(s) + "\n";
      out += wrap(s.help + details_text(s), 8, 100);
    }
  };
  std::vector<std::string> extra_groups;
  for (const auto& s : extra) {
    if (std::find(extra_groups.begin(), extra_groups.end(), s.group) == extra_groups.end())
      extra_groups.push_back(s.group);
  }
  for (const auto& g : extra_groups) print_group(g, extra);
  for (const auto& g : option_groups()) print_group(g, option_table());
  out += "\nOther:\n  -h, --help\n        Show this help and exit.\n  --help-json\n"
         "        Print every option as JSON (for tools and the desktop app) and exit.\n"
         "  --version\n        Print the version and exit.\n";
  return out;
}

json help_json(const std::vector<OptionSpec>& extra) {
  json arr = json::array();
  auto add = [&](const OptionSpec& s) {
    static const char* kSupport[] = {"supported", "no_effect", "not_yet"};
    json o = {{"name", s.name},
              {"key", s.key()},
              {"flags", json::array({s.flag()})},
              {"group", s.group},
              {"type", type_name(s.binding.type)},
              {"nullable", s.binding.nullable},
              {"metavar", s.metavar},
              {"help", s.help},
              {"default", s.default_value()},
              {"choices", s.choices},
              {"min", s.min ? json(*s.min) : json(nullptr)},
              {"max", s.max ? json(*s.max) : json(nullptr)},
              {"min_exclusive", s.min_exclusive},
              {"env", s.env.empty() ? json(nullptr) : json(s.env)},
              {"support", kSupport[static_cast<int>(s.support)]},
              {"note", s.note},
              {"refused_choices", json::object()}};
    for (const auto& [value, why] : s.refused) o["refused_choices"][value] = why;
    for (const auto& a : s.aliases) o["flags"].push_back(a);
    arr.push_back(o);
  };
  for (const auto& s : extra) add(s);
  for (const auto& s : option_table()) add(s);
  return json{{"version", CYPRIS_VERSION}, {"options", arr}};
}

std::string option_reference_markdown() {
  std::string out;
  for (const auto& g : option_groups()) {
    out += "\n### " + g + "\n\n| Flag | Default | Description |\n|---|---|---|\n";
    for (const auto& s : option_table()) {
      if (s.group != g) continue;
      std::string flags = "`" + flags_text(s) + "`";
      for (const auto& a : s.aliases) {
        if (a.rfind("--", 0) == 0) flags += "<br>`" + a + "`";
      }
      json def = s.default_value();
      std::string def_text = def.is_null() ? "" : value_text(def);
      std::string desc = s.help;
      std::vector<std::string> accepted;
      for (const auto& c : s.choices) {
        if (!s.refusal(c)) accepted.push_back(c);
      }
      if (!accepted.empty()) desc += fmt::format(" Choices: {}.", fmt::join(accepted, ", "));
      desc += refused_text(s);
      if (s.binding.type == OptionType::Bool && def.is_boolean() && def.get<bool>())
        desc += " Off: `--no-" + s.name + "`.";
      std::string r = range_text(s);
      if (!r.empty()) desc += " Range: " + r + ".";
      if (!s.env.empty()) desc += " Env: `" + s.env + "`.";
      std::string status = "**Works.**";
      if (s.support == OptionSupport::NoEffect) status = "**Warns**: has no effect in Cypris: " + s.note + ".";
      if (s.support == OptionSupport::NotYet) status = "**Refused**: not supported yet (" + s.note + ").";
      if (s.support == OptionSupport::Supported && !s.refused.empty()) status = "**Works**, some choices refused.";
      desc = status + " " + desc;
      std::string line = fmt::format("| {} | {} | {} |\n", flags, def_text.empty() ? "" : "`" + def_text + "`", desc);
      // Pipes inside cells would break the table.
      std::string cleaned;
      for (size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '|' && i > 0 && line[i - 1] != ' ' && i + 1 < line.size() && line[i + 1] != ' ') {
          cleaned += "\\|";
        } else {
          cleaned += line[i];
        }
      }
      out += cleaned;
    }
  }
  return out;
}

}  // namespace cypris
