#include "app/server/openai/sampling_from_json.h"

#include <fmt/format.h>

#include <cmath>
#include <sstream>

#include "app/server/errors.h"
#include "engine/common/error.h"
#include "engine/guided/guided_decoding.h"

namespace cypris::server {

using nlohmann::json;

namespace {

std::string type_name(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void bad(const std::string& field, const std::string& want, const json& v) {
  throw HttpError(400, fmt::format("'{}' must be {}, got {}", field, want, type_name(v)), field);
}

double as_number(const std::string& field, const json& v) {
  if (!v.is_number()) bad(field, "a number", v);
  return v.get<double>();
}

double as_integer(const std::string& field, const json& v) {
  if (!v.is_number()) bad(field, "an integer", v);
  double d = v.get<double>();
  if (!std::isfinite(d) || std::floor(d) != d) {
    throw HttpError(400, fmt::format("'{}' must be an integer, got {}", field, v.dump()), field);
  }
  return d;
}

bool as_bool(const std::string& field, const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) return v.get<int64_t>() == 1;
  bad(field, "a boolean", v);
}

std::vector<int32_t> as_int_list(const std::string& field, const json& v) {
  if (!v.is_array()) bad(field, "a list of integers", v);
  std::vector<int32_t> out;
  for (const auto& e : v) {
    if (!e.is_number_integer()) bad(field, "a list of integers", e);
    int64_t x = e.get<int64_t>();
    if (x < INT32_MIN || x > INT32_MAX) {
      throw HttpError(400, fmt::format("'{}' contains {}, which is not a token id", field, x), field);
    }
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

std::vector<std::string> as_string_list(const std::string& field, const json& v, bool allow_single) {
  if (allow_single && v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) bad(field, allow_single ? "a string or a list of strings" : "a list of strings", v);
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) bad(field, "a list of strings", e);
    out.push_back(e.get<std::string>());
  }
  return out;
}

bool is_falsy(const json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_string()) return v.get_ref<const std::string&>().empty();
  if (v.is_array() || v.is_object()) return v.empty();
  return false;
}

// The first of name and its aliases present in the body (and not null); nullptr when none.
const json* find_field(const json& body, const SamplingParamInfo& info, std::string& used) {
  auto try_key = [&](std::string_view k) -> const json* {
    auto it = body.find(std::string(k));
    if (it == body.end()) return nullptr;
    used = std::string(k);
    return &*it;
  };
  if (const json* v = try_key(info.name)) return v;
  std::string_view al = info.aliases;
  while (!al.empty()) {
    size_t sp = al.find(' ');
    std::string_view a = al.substr(0, sp);
    if (!a.empty()) {
      if (const json* v = try_key(a)) return v;
    }
    if (sp == std::string_view::npos) break;
    al.remove_prefix(sp + 1);
  }
  return nullptr;
}

void parse_sampler_order(SamplingParams& p, const std::string& field, const json& v, bool strict) {
  try {
    if (!v.is_array()) bad(field, "a list of sampler ids or names", v);
    bool all_int = true, all_str = true;
    for (const auto& e : v) {
      all_int = all_int && e.is_number_integer();
      all_str = all_str && e.is_string();
    }
    if (all_int) {
      std::vector<int> ids;
      for (const auto& e : v) ids.push_back(e.get<int>());
      p.sampler_priority = parse_sampler_priority(std::span<const int>(ids));
    } else if (all_str) {
      std::vector<std::string> names;
      for (const auto& e : v) names.push_back(e.get<std::string>());
      p.sampler_priority = parse_sampler_priority(std::span<const std::string>(names));
    } else {
      bad(field, "a list of sampler ids or a list of sampler names", v);
    }
  } catch (const HttpError&) {
    if (strict) throw;
  } catch (const cypris::Error& e) {
    if (strict) throw HttpError(400, e.what(), field);
  }
}

}  // namespace

SamplingParams sampling_from_json(const json& body, const SamplingDefaults& defaults,
                                  const std::set<std::string>& skip) {
  SamplingParams p;
  p.max_tokens = defaults.max_tokens;
  p.temperature = defaults.temperature;

  for (const SamplingParamInfo& info : sampling_param_table()) {
    const std::string name(info.name);
    if (skip.count(name)) continue;
    std::string used;
    const json* v = find_field(body, info, used);
    if (!v || skip.count(used)) continue;
    // sampler_order is KoboldCpp's numbering when SillyTavern sends it: use it only if it is a
    // complete Aphrodite order, otherwise ignore it (sampler_priority itself is strict).
    if (info.kind == ParamKind::SamplerOrder) {
      if (!v->is_null()) parse_sampler_order(p, used, *v, used == "sampler_priority");
      continue;
    }
    if (v->is_null()) {
      if (info.optional && info.set) info.set(p, std::nullopt);
      continue;
    }
    switch (info.kind) {
      case ParamKind::Float:
        info.set(p, as_number(used, *v));
        break;
      case ParamKind::Int: {
        if (name == "seed") {
          double d = as_integer(used, *v);
          if (d < 0) {
            p.seed.reset();  // -1: random
          } else if (v->is_number_unsigned()) {
            p.seed = v->get<uint64_t>();
          } else {
            p.seed = static_cast<uint64_t>(v->get<int64_t>());
          }
          break;
        }
        double d = as_integer(used, *v);
        // Int parameters are 32-bit: a larger value would wrap into something else entirely.
        if (d < double(INT32_MIN) || d > double(INT32_MAX)) {
          throw HttpError(400, fmt::format("'{}' must be in [{}, {}], got {}", used, INT32_MIN, INT32_MAX, v->dump()), used);
        }
        if (name == "top_k" && d == 0) d = -1;  // 0 = off, as clients send it
        info.set(p, d);
        break;
      }
      case ParamKind::Bool:
        info.set(p, as_bool(used, *v) ? 1.0 : 0.0);
        break;
      case ParamKind::IntList: {
        auto ids = as_int_list(used, *v);
        if (name == "custom_token_bans") p.custom_token_bans = std::move(ids);
        if (name == "stop_token_ids") p.stop_token_ids = std::move(ids);
        if (name == "allowed_token_ids") p.allowed_token_ids = std::move(ids);
        if (name == "dry_sequence_breaker_ids") p.dry_sequence_breaker_ids = std::move(ids);
        break;
      }
      case ParamKind::StringList: {
        if (name == "dry_sequence_breakers") {
          json list = *v;
          if (v->is_string()) {  // SillyTavern sends a JSON string of a list
            const std::string s = v->get<std::string>();
            if (s.find_first_not_of(" \t\r\n") == std::string::npos) {
              p.dry_sequence_breakers.clear();
              break;
            }
            try {
              list = json::parse(s);
            } catch (const json::parse_error&) {
              throw HttpError(400, "'dry_sequence_breakers' must be a list of strings or a JSON string of one", used);
            }
          }
          p.dry_sequence_breakers = as_string_list(used, list, false);
        } else if (name == "stop") {
          p.stop = as_string_list(used, *v, true);
        } else if (name == "banned_strings") {
          p.banned_strings = as_string_list(used, *v, true);
        }
        break;
      }
      case ParamKind::TokenBiasMap: {
        if (!v->is_object()) bad(used, "an object of token id to bias", *v);
        for (const auto& [k, b] : v->items()) {
          int64_t id = 0;
          try {
            // Digits only: stoll would also take " 5" and "+5", which no client means as an id.
            if (k.empty() || k.size() > 10 || k.find_first_not_of("0123456789") != std::string::npos) {
              throw std::invalid_argument(k);
            }
            id = std::stoll(k);
          } catch (const std::exception&) {
            throw HttpError(400, fmt::format("'{}' keys must be token ids, got \"{}\"", used, k), used);
          }
          if (id < 0 || id > INT32_MAX) {
            throw HttpError(400, fmt::format("'{}' key {} is not a token id", used, id), used);
          }
          double bias = as_number(used, b);
          if (bias < -100 || bias > 100) {
            throw HttpError(400, fmt::format("'{}' values must be in [-100, 100], got {}", used, bias), used);
          }
          p.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(bias);
        }
        break;
      }
      case ParamKind::EarlyStopping: {
        if (v->is_boolean()) {
          p.early_stopping = v->get<bool>() ? EarlyStopping::True : EarlyStopping::False;
        } else if (v->is_string()) {
          auto e = parse_early_stopping(v->get<std::string>());
          if (!e) throw HttpError(400, "'early_stopping' must be true, false or \"never\"", used);
          p.early_stopping = *e;
        } else {
          bad(used, "true, false or \"never\"", *v);
        }
        break;
      }
      case ParamKind::SamplerOrder:
        break;
    }
  }
  // Kobold's and older Aphrodite's dynatemp_range, on every route: dynatemp min/max around the
  // temperature (which is known only now). It is not a table entry: it sets two of them.
  if (!skip.count("dynatemp_range")) {
    if (auto it = body.find("dynatemp_range"); it != body.end() && !it->is_null()) {
      const double range = as_number("dynatemp_range", *it);
      if (range < 0 || !std::isfinite(range)) {
        throw HttpError(400, fmt::format("'dynatemp_range' must be >= 0, got {}", it->dump()), "dynatemp_range");
      }
      if (range > 0) p.apply_dynatemp_range(static_cast<float>(range));
    }
  }
  return p;
}

GuidedDecodingParams guided_fields_from_json(const json& body, std::string* field_out) {
  GuidedDecodingParams g;
  std::string field;
  if (auto it = body.find("guided_choice"); it != body.end() && it->is_array() && it->empty()) {
    throw HttpError(400, "'guided_choice' is empty: the output must be one of the choices, so give at least one",
                    "guided_choice");
  }
  auto take = [&](const char* k, GuidedKind kind) -> const json* {
    auto it = body.find(k);
    if (it == body.end() || is_falsy(*it)) return nullptr;
    if (g.active()) {
      throw HttpError(400, fmt::format("'{}' and '{}' both ask for guided decoding; give only one", field, k), k);
    }
    g.kind = kind;
    field = k;
    return &*it;
  };
  auto text_of = [&](const json& v, const char* k) {
    if (!v.is_string()) throw HttpError(400, fmt::format("'{}' must be a string", k), k);
    return v.get<std::string>();
  };
  if (const json* v = take("guided_json", GuidedKind::JsonSchema)) {
    if (v->is_string()) {
      g.text = v->get<std::string>();
    } else if (v->is_object() || v->is_boolean()) {
      g.text = v->dump();
    } else {
      throw HttpError(400, "'guided_json' must be a JSON Schema (an object, or a string holding one)", "guided_json");
    }
  }
  if (const json* v = take("guided_regex", GuidedKind::Regex)) g.text = text_of(*v, "guided_regex");
  if (const json* v = take("guided_choice", GuidedKind::Choice)) {
    if (!v->is_array()) throw HttpError(400, "'guided_choice' must be an array of strings", "guided_choice");
    for (const auto& c : *v) {
      if (!c.is_string()) throw HttpError(400, "'guided_choice' must be an array of strings", "guided_choice");
      g.choices.push_back(c.get<std::string>());
    }
  }
  if (const json* v = take("guided_grammar", GuidedKind::Lark)) {
    g.text = text_of(*v, "guided_grammar");
    // vLLM takes Lark EBNF (outlines) or GBNF-style EBNF (xgrammar): "::=" tells them apart.
    if (g.text.find("::=") != std::string::npos) g.kind = GuidedKind::Gbnf;
  }
  for (const char* k : {"grammar", "grammar_string"}) {
    if (const json* v = take(k, GuidedKind::Gbnf)) g.text = text_of(*v, k);
  }
  if (auto it = body.find("response_format"); it != body.end() && !is_falsy(*it)) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
      throw HttpError(400, "'response_format' must be an object with a 'type'", "response_format");
    }
    const std::string type = (*it)["type"].get<std::string>();
    if (type == "json_object" || type == "json_schema") {
      if (g.active()) {
        throw HttpError(400, fmt::format("'{}' and 'response_format' both ask for guided decoding; give only one", field),
                        "response_format");
      }
      field = "response_format";
      if (type == "json_object") {
        g.kind = GuidedKind::JsonObject;
      } else {
        auto js = it->find("json_schema");
        if (js == it->end() || !js->is_object()) {
          throw HttpError(400, "'response_format.json_schema' must be an object with a 'schema'", "response_format");
        }
        auto sc = js->find("schema");
        if (sc == js->end() || !(sc->is_object() || sc->is_boolean())) {
          throw HttpError(400, "'response_format.json_schema.schema' must be a JSON Schema object", "response_format");
        }
        // strict: the output is generated from the schema, so it always conforms.
        g.kind = GuidedKind::JsonSchema;
        g.text = sc->dump();
      }
    } else if (type != "text") {
      throw HttpError(400,
                      fmt::format("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got "
                                  "\"{}\"", type),
                      "response_format");
    }
  }
  if (auto it = body.find("guided_whitespace_pattern"); it != body.end() && !is_falsy(*it)) {
    g.whitespace_pattern = text_of(*it, "guided_whitespace_pattern");
    if (g.kind != GuidedKind::JsonSchema && g.kind != GuidedKind::JsonObject) g.whitespace_pattern.reset();
  }
  if (field_out) *field_out = field;
  return g;
}

void compile_guided(const GuidedDecodingParams& g, const std::string& field) {
  if (!g.active()) return;
  try {
    guided::compile(g);  // refuses bad schemas/grammars now (400) rather than in the engine; cached by text
  } catch (const Error& e) {
    throw HttpError(400, e.what(), field);
  }
}

GuidedDecodingParams guided_from_json(const json& body) {
  std::string field;
  GuidedDecodingParams g = guided_fields_from_json(body, &field);
  compile_guided(g, field);
  return g;
}

std::string summarize_params(const SamplingParams& p) {
  std::ostringstream o;
  o << "n=" << p.n << ", temperature=" << p.temperature << ", top_p=" << p.top_p << ", top_k=" << p.top_k
    << ", min_p=" << p.min_p << ", repetition_penalty=" << p.repetition_penalty
    << ", max_tokens=" << (p.max_tokens ? std::to_string(*p.max_tokens) : std::string("auto"))
    << ", stop=" << p.stop.size() << " strings";
  if (p.seed) o << ", seed=" << *p.seed;
  return o.str();
}

}  // namespace cypris::server
