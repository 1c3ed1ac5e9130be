// The sampler table (Aphrodite's sampler set: aphrodite-engine-options.txt "Sampler options" plus
// the samplers added after mid-2024 in sampler-notes.md), SamplerSettings and presets.
#include "app/ui/state/sampler_table.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/ranges.h>

#include "engine/common/error.h"

namespace cypris {

using json = nlohmann::json;

namespace {

struct Builder {
  std::vector<SamplerSpec> t;
  std::string group;
  SamplerSpec& add(SamplerType type, const std::string& key, const std::string& label, json def, double lo, double hi,
                   const std::string& help) {
    SamplerSpec s;
    s.key = key;
    s.label = label;
    s.group = group;
    s.type = type;
    s.default_value = std::move(def);
    s.slider_min = lo;
    s.slider_max = hi;
    s.help = help;
    t.push_back(std::move(s));
    return t.back();
  }
  SamplerSpec& f(const std::string& key, const std::string& label, double def, double lo, double hi,
                 const std::string& help) {
    return add(SamplerType::Float, key, label, def, lo, hi, help);
  }
  SamplerSpec& i(const std::string& key, const std::string& label, int64_t def, double lo, double hi,
                 const std::string& help) {
    return add(SamplerType::Int, key, label, def, lo, hi, help);
  }
  SamplerSpec& b(const std::string& key, const std::string& label, bool def, const std::string& help) {
    return add(SamplerType::Bool, key, label, def, 0, 1, help);
  }
};

SamplerSpec& limits(SamplerSpec& s, std::optional<double> lo, std::optional<double> hi, bool lo_exclusive = false) {
  s.min = lo;
  s.max = hi;
  s.min_exclusive = lo_exclusive;
  return s;
}

std::vector<SamplerSpec> build() {
  Builder b;
  b.group = "Basic";
  limits(b.i("max_tokens", "Max tokens", 512, 1, 4096, "The maximum number of tokens to generate for the reply."), 1,
         std::nullopt);
  limits(b.i("min_tokens", "Min tokens", 0, 0, 512,
             "Minimum number of tokens to generate before EOS or stop tokens are allowed."),
         0, std::nullopt);
  limits(b.f("temperature", "Temperature", 1.0, 0.0, 3.0,
             "Randomness of the output: lower is more deterministic, 0 is greedy. Disabled: 1."),
         0, std::nullopt);
  limits(b.f("top_p", "Top P", 1.0, 0.0, 1.0, "Keep the smallest set of tokens whose probabilities add up to P. "
                                                "Disabled: 1."),
         0, 1, true);
  limits(b.i("top_k", "Top K", -1, -1, 200, "Keep only the K most likely tokens. Disabled: -1 (or 0)."), -1,
         std::nullopt);
  limits(b.f("min_p", "Min P", 0.0, 0.0, 1.0,
             "Minimum probability of a token, relative to the most likely token. Disabled: 0."),
         0, 1);
  limits(b.f("top_a", "Top A", 0.0, 0.0, 1.0,
             "Threshold relative to the square of the top probability; trims when the model is certain. "
             "Disabled: 0."),
         0, std::nullopt);
  limits(b.i("seed", "Seed", -1, -1, 100000, "Random seed for this request. -1: random."), -1, std::nullopt);

  b.group = "Penalties";
  limits(b.f("repetition_penalty", "Repetition penalty", 1.0, 1.0, 2.0,
             "Penalise tokens already in the prompt or the reply; above 1 discourages repeats. Disabled: 1."),
         0, std::nullopt, true);
  limits(b.f("presence_penalty", "Presence penalty", 0.0, -2.0, 2.0,
             "Penalise tokens that appeared in the reply so far; above 0 encourages new tokens. Disabled: 0."),
         -2, 2);
  limits(b.f("frequency_penalty", "Frequency penalty", 0.0, -2.0, 2.0,
             "Penalise tokens by how often they appeared in the reply so far. Disabled: 0."),
         -2, 2);
  limits(b.i("no_repeat_ngram_size", "No-repeat n-gram size", 0, 0, 20,
             "Ban any token that would complete an n-gram of this size already seen. Disabled: 0."),
         0, std::nullopt);

  b.group = "DRY";
  limits(b.f("dry_multiplier", "DRY multiplier", 0.0, 0.0, 5.0,
             "Strength of the DRY (Don't Repeat Yourself) penalty on tokens that extend a repeated sequence. "
             "Disabled: 0."),
         0, std::nullopt);
  limits(b.f("dry_base", "DRY base", 1.75, 1.01, 4.0,
             "Base of the exponential DRY penalty: multiplier * base^(length - allowed length). Must be above 1."),
         1, std::nullopt, true);
  limits(b.i("dry_allowed_length", "DRY allowed length", 2, 0, 20,
             "Repeated sequences up to this length are not penalised."),
         0, std::nullopt);
  limits(b.i("dry_range", "DRY range", 0, 0, 16384, "How many recent tokens DRY looks at. 0: the whole context."), 0,
         std::nullopt);
  {
    auto& s = b.add(SamplerType::StringList, "dry_sequence_breakers", "DRY sequence breakers",
                    json::array({"\n", ":", "\"", "*"}), 0, 0,
                    "Strings that break a repeated sequence for DRY (comma separated; \\n for a newline).");
    (void)s;
  }

  b.group = "Truncation";
  limits(b.f("tfs", "Tail-free sampling", 1.0, 0.0, 1.0,
             "Tail-Free Sampling: cut low-probability tokens after the plateau of the sorted probabilities. "
             "Disabled: 1."),
         0, 1);
  limits(b.f("typical_p", "Typical P", 1.0, 0.0, 1.0,
             "Locally typical sampling: keep tokens whose information content is close to the expected. "
             "Disabled: 1."),
         0, 1, true);
  limits(b.f("eta_cutoff", "Eta cutoff", 0.0, 0.0, 20.0,
             "Eta sampling: entropy-adaptive cutoff, in units of 1e-4. Disabled: 0."),
         0, std::nullopt);
  limits(b.f("epsilon_cutoff", "Epsilon cutoff", 0.0, 0.0, 9.0,
             "Epsilon sampling: fixed probability cutoff, in units of 1e-4. Disabled: 0."),
         0, std::nullopt);
  limits(b.f("nsigma", "Top-nsigma", 0.0, 0.0, 5.0,
             "Mask logits below max_logit - nsigma * std(logits). Disabled: 0."),
         0, std::nullopt);
  limits(b.f("xtc_threshold", "XTC threshold", 0.1, 0.0, 0.5,
             "Exclude Top Choices: tokens above this probability (except the least likely of them) are removed."),
         0, std::nullopt);
  limits(b.f("xtc_probability", "XTC probability", 0.0, 0.0, 1.0,
             "Chance per step that XTC is applied. Disabled: 0."),
         0, 1);

  b.group = "Temperature";
  limits(b.f("dynatemp_range", "Dynamic temperature range", 0.0, 0.0, 2.0,
             "Dynamic temperature between temperature - range and temperature + range, scaled by the entropy. "
             "Disabled: 0."),
         0, std::nullopt);
  limits(b.f("dynatemp_exponent", "Dynamic temperature exponent", 1.0, 0.01, 5.0,
             "Exponent of dynamic temperature: higher values trend towards lower temperatures."),
         0, std::nullopt, true);
  limits(b.f("smoothing_factor", "Smoothing factor", 0.0, 0.0, 5.0, "Quadratic sampling strength. Disabled: 0."), 0,
         std::nullopt);
  limits(b.f("smoothing_curve", "Smoothing curve", 1.0, 1.0, 5.0, "Cubic sampling curve. Disabled: 1."), 1,
         std::nullopt);
  b.b("temperature_last", "Temperature last", false, "Apply temperature at the end of the sampler chain.");
  limits(b.f("skew", "Skew", 0.0, 0.0, 5.0, "Skews the cumulative distribution after softmax. Disabled: 0."), 0,
         std::nullopt);

  b.group = "Mirostat";
  {
    auto& s = b.add(SamplerType::Choice, "mirostat_mode", "Mirostat mode", 0, 0, 2,
                    "Mirostat adaptive decoding: 0 off, 2 Mirostat 2.0 (all other samplers are skipped).");
    s.choices = {"0", "2"};
  }
  limits(b.f("mirostat_tau", "Mirostat tau", 0.0, 0.0, 10.0, "Target surprise (perplexity) for Mirostat."), 0,
         std::nullopt);
  limits(b.f("mirostat_eta", "Mirostat eta", 0.0, 0.0, 1.0, "Learning rate of Mirostat's surprise estimate."), 0,
         std::nullopt);

  b.group = "Output";
  limits(b.i("n", "Replies (n)", 1, 1, 8, "Number of replies to generate; the chat shows the first."), 1,
         std::nullopt);
  limits(b.i("best_of", "Best of", 1, 1, 8, "Generate this many and return the best n. Default: n."), 1,
         std::nullopt);
  b.b("use_beam_search", "Beam search", false, "Use beam search instead of sampling.");
  b.f("length_penalty", "Length penalty", 1.0, -2.0, 2.0, "Penalise sequences by length (beam search).");
  {
    auto& s = b.add(SamplerType::Choice, "early_stopping", "Early stopping", "false", 0, 0,
                    "Beam search stop condition: true, false (heuristic) or never.");
    s.choices = {"false", "true", "never"};
  }
  b.add(SamplerType::StringList, "stop", "Stop strings", json::array(), 0, 0,
        "Strings that end the reply (comma separated); they are not included in the reply.");
  b.add(SamplerType::IntList, "stop_token_ids", "Stop token ids", json::array(), 0, 0,
        "Token ids that end the reply (comma separated).");
  b.add(SamplerType::IntList, "custom_token_bans", "Banned token ids", json::array(), 0, 0,
        "Token ids that are never generated (comma separated).");
  b.b("include_stop_str_in_output", "Include stop string", false, "Keep the stop string at the end of the reply.");
  b.b("ignore_eos", "Ignore EOS", false, "Keep generating after the end-of-sequence token.");
  b.b("skip_special_tokens", "Skip special tokens", true, "Leave special tokens out of the reply text.");
  b.b("spaces_between_special_tokens", "Spaces between special tokens", true,
      "Put spaces between special tokens in the reply text.");
  limits(b.i("logprobs", "Logprobs", 0, 0, 20, "Log probabilities of the top tokens per position (0: none)."), 0,
         std::nullopt);
  limits(b.i("prompt_logprobs", "Prompt logprobs", 0, 0, 20, "Log probabilities per prompt token (0: none)."), 0,
         std::nullopt);
  return std::move(b.t);
}

std::string where_key(const std::string& where, const std::string& key) { return where + ": '" + key + "'"; }

json checked(const SamplerSpec& s, const json& v, const std::string& where) {
  const std::string at = where_key(where, s.key);
  auto check_range = [&](double x) {
    CYPRIS_CHECK(std::isfinite(x), "{}: {} is not a finite number", at, x);
    if (s.min) {
      bool ok = s.min_exclusive ? x > *s.min : x >= *s.min;
      CYPRIS_CHECK(ok, "{}: {} is too small (must be {} {})", at, x, s.min_exclusive ? ">" : ">=", *s.min);
    }
    if (s.max) CYPRIS_CHECK(x <= *s.max, "{}: {} is too large (must be <= {})", at, x, *s.max);
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
      CYPRIS_CHECK(v.is_array(), "{}: expected a list of strings, got {}", at, v.dump());
      for (const auto& e : v) CYPRIS_CHECK(e.is_string(), "{}: expected a list of strings, got {}", at, v.dump());
      return v;
    case SamplerType::IntList:
      CYPRIS_CHECK(v.is_array(), "{}: expected a list of token ids, got {}", at, v.dump());
      for (const auto& e : v) {
        CYPRIS_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0, "{}: expected a list of token ids, got {}", at,
                     v.dump());
      }
      return v;
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

SamplerSettings::SamplerSettings() { reset_all(); }

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
  *this = next;
}

json SamplerSettings::to_preset(const std::string& name, const std::string& description) const {
  json values = json::object();
  for (const auto& s : sampler_table()) {
    if (!is_default(s.key)) values[s.key] = get(s.key);
  }
  return json{{"name", name}, {"description", description}, {"values", values}};
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
