// The OpenAI-side routes other than generation: models, tokenize/detokenize, health, version,
// service info, metrics, and the admin routes that load and unload the model.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "app/server/errors.h"
#include "app/server/openai/chat_prompt.h"
#include "app/server/route_util.h"
#include "app/server/openai/routes.h"
#include "app/server/router.h"
#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/config/options.h"

namespace cypris::server {

using nlohmann::json;

namespace {

json model_cards(ServerContext& ctx) {
  json data = json::array();
  auto engine = ctx.engine();
  if (!engine) return data;
  const ModelInfo info = engine->model_info();
  const int64_t created = unix_time_now();
  for (const auto& name : ctx.served_names()) {
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "pygmalionai"},
                    {"root", name},
                    {"parent", nullptr},
                    {"max_model_len", info.max_model_len},
                    {"permission", json::array({{{"id", "modelperm-" + name},
                                                 {"object", "model_permission"},
                                                 {"created", created},
                                                 {"allow_create_engine", false},
                                                 {"allow_sampling", true},
                                                 {"allow_logprobs", true},
                                                 {"allow_search_indices", false},
                                                 {"allow_view", true},
                                                 {"allow_fine_tuning", false},
                                                 {"organization", "*"},
                                                 {"group", nullptr},
                                                 {"is_blocking", false}}})}});
  }
  // LoRA adapters: their own cards, the base model as parent (vLLM's and Aphrodite's lists).
  const std::string parent = ctx.served_name();
  for (const LoraInfo& l : engine->loras()) {
    data.push_back({{"id", l.name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "pygmalionai"},
                    {"root", l.path},
                    {"parent", parent},
                    {"permission", json::array()}});
  }
  return data;
}

// The ids of a /v1/tokenize body (prompt or chat messages), refused with 400 past the limits.
std::vector<int32_t> tokenize_ids(ServerContext& ctx, const EngineClient& engine, const json& body,
                                  const std::string& raw) {
  const Tokenizer* tok = engine.tokenizer();
  if (!tok) throw HttpError(400, "this model was loaded with --skip-tokenizer-init: there is no tokenizer");
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    const std::string text = chat_prompt_of(body, raw, tok, ctx, true);
    check_text_size(ctx, engine, text, "messages");
    ids = tok->encode(text, get_bool(body, "add_special_tokens", false));
  } else {
    auto it = body.find("prompt");
    if (it == body.end() || !it->is_string()) throw HttpError(400, "'prompt' must be a string", "prompt");
    check_text_size(ctx, engine, it->get_ref<const std::string&>(), "prompt");
    ids = tok->encode(it->get_ref<const std::string&>(), get_bool(body, "add_special_tokens", true));
  }
  const int64_t limit = max_text_tokens(ctx, engine);
  if (static_cast<int64_t>(ids.size()) > limit) {
    throw HttpError(400,
                    fmt::format("the text is {} tokens; this server tokenizes at most {} (--max-tokenize-tokens)",
                                ids.size(), limit),
                    body.contains("messages") ? "messages" : "prompt");
  }
  return ids;
}

// "[1,2,3]" written once and reused for each field that lists the ids: a large answer is sized
// once instead of being built as JSON values per id (that held every id twice, 16+ bytes each).
std::string ids_text(const std::vector<int32_t>& ids) {
  std::string out;
  out.reserve(ids.size() * 7 + 2);
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += ']';
  return out;
}

void send_tokenize(httplib::Response& res, ServerContext& ctx, const httplib::Request& req, bool v05_names) {
  auto engine = ctx.require_engine();
  const std::vector<int32_t> ids = tokenize_ids(ctx, *engine, parse_json_body(req), req.body);
  const std::string list = ids_text(ids);
  std::string out;
  if (v05_names) {
    out = fmt::format("{{\"value\":{},\"ids\":{}}}", ids.size(), list);
  } else {
    // v0.5-style and KoboldCpp-style clients read value and ids.
    out = fmt::format("{{\"tokens\":{},\"count\":{},\"max_model_len\":{},\"value\":{},\"ids\":{}}}", list,
                      ids.size(), engine->model_info().max_model_len, ids.size(), list);
  }
  res.status = 200;
  res.set_content(std::move(out), "application/json");
}

std::string detokenize(ServerContext& ctx, const json& tokens) {
  auto engine = ctx.require_engine();
  const Tokenizer* tok = engine->tokenizer();
  if (!tok) throw HttpError(400, "this model was loaded with --skip-tokenizer-init: there is no tokenizer");
  if (!tokens.is_array()) throw HttpError(400, "'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const auto& t : tokens) {
    if (!t.is_number_integer()) throw HttpError(400, "'tokens' must be a list of token ids", "tokens");
    int64_t v = t.get<int64_t>();
    if (v < 0 || v >= tok->vocab_size()) {
      throw HttpError(400, fmt::format("'tokens' contains {}, outside the vocabulary [0, {})", v, tok->vocab_size()),
                      "tokens");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return tok->decode(ids, false);
}

// Options a load body cannot apply: the server's own (its socket, keys, chat template, Kobold
// settings: only a restart changes them) and --config (the body is the options). The model's
// served names are applied with the model.
bool load_can_apply(const OptionSpec& s) {
  if (s.name == "served-model-name") return true;
  return s.group != "API Options" && s.group != "Cypris Options";
}

// The options of /v1/model/load: YAML or JSON, as the body or as the multipart field config_file.
EngineConfig config_from_load_body(const httplib::Request& req, const EngineConfig& base) {
  std::string text = req.body;
  if (req.is_multipart_form_data()) {
    if (!req.has_file("config_file")) throw HttpError(400, "multipart body needs a 'config_file' field", "config_file");
    text = req.get_file_value("config_file").content;
  }
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw HttpError(400, "the body must hold the options (YAML or JSON), e.g. {\"model\": \"/path/to/model\"}");
  }
  // The same reading and checks as --config, without a file (no temporary path to leak).
  EngineConfig cfg = base;
  std::set<std::string> keys;
  load_options_text(text, "the load options", cfg, &keys);
  for (const auto& k : keys) {
    const OptionSpec* s = find_option(k);
    if (s && !load_can_apply(*s)) {
      throw HttpError(400,
                      fmt::format("'{}' cannot be set by /v1/model/load: {}", s->name,
                                  s->name == "config" ? "send the options themselves as the body"
                                                      : "it is a server option; restart the server to change it"),
                      s->name);
    }
  }
  validate_options(cfg);
  if (cfg.model.model.empty()) throw HttpError(400, "the options must name a 'model'", "model");
  return cfg;
}

// The model path the admin gave, when it is a local path that cannot be resolved (a symlink loop,
// a component that is not a folder, no permission): HttpError 400 naming it and what is wrong.
// Paths that do not exist pass (the loader says what it looked for, or takes a Hub repo id).
void check_model_path_resolves(const std::string& model) {
  std::error_code ec;
  (void)std::filesystem::status(model, ec);  // only ec is wanted
  if (!ec || ec == std::errc::no_such_file_or_directory) return;
  const std::string why =
      ec == std::errc::too_many_symbolic_link_levels ? "it is a loop of symbolic links" : ec.message();
  throw HttpError(400, fmt::format("'model' {} cannot be resolved: {}", model, why), "model");
}

// Serialises /v1/model/load: one load at a time, the others answered 409 at once. (Process-wide:
// a process serves one Server, the desktop app's or the headless one.)
std::mutex g_load_mu;

}  // namespace

void register_openai_routes(Router& r) {
  ServerContext& ctx = r.ctx;
  r.get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"}, {"data", model_cards(ctx)}});
  });
  r.post("/v1/completions",
         [&ctx](const httplib::Request& req, httplib::Response& res) { handle_completions(ctx, req, res); });
  r.post("/v1/chat/completions",
         [&ctx](const httplib::Request& req, httplib::Response& res) { handle_chat_completions(ctx, req, res); });
  r.post("/v1/tokenize",
         [&ctx](const httplib::Request& req, httplib::Response& res) { send_tokenize(res, ctx, req, false); });
  r.post("/v1/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_json_body(req);
    if (!body.contains("tokens")) throw HttpError(400, "'tokens' is required", "tokens");
    send_json(res, 200, {{"prompt", detokenize(ctx, body["tokens"])}});
  });
  // Aphrodite v0.5 names.
  r.post("/v1/token/encode",
         [&ctx](const httplib::Request& req, httplib::Response& res) { send_tokenize(res, ctx, req, true); });
  r.post("/v1/token/decode", [&ctx](const httplib::Request& req, httplib::Response& res) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::parse_error& e) {
      throw HttpError(400, std::string("request body is not valid JSON: ") + e.what());
    }
    const json tokens = body.is_object() ? body.value("tokens", json()) : body;
    send_json(res, 200, {{"value", detokenize(ctx, tokens)}});
  });

  r.get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (!ctx.engine()) throw HttpError(503, "no model is loaded");
    res.status = 200;
  });
  r.get("/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"version", CYPRIS_VERSION}});
  });
  r.get("/.well-known/serviceinfo", [&ctx](const httplib::Request&, httplib::Response& res) {
    json api = {{"openai", {{"name", "OpenAI API"}, {"rel_url", "/v1"}, {"documentation", "/redoc"}, {"version", 1}}}};
    if (ctx.cfg().server.launch_kobold_api) {
      api["koboldai"] = {{"name", "KoboldAI API"},
                         {"rel_url", "/api"},
                         {"documentation", "https://lite.koboldai.net/koboldcpp_api"},
                         {"version", 1}};
    }
    send_json(res, 200,
              {{"version", 0.2},
               {"software",
                {{"name", "Cypris"}, {"version", CYPRIS_VERSION}, {"repository", ""}, {"homepage", ""}, {"logo", ""}}},
               {"api", api}});
  });
  r.get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    auto engine = ctx.engine();
    EngineStats stats = engine ? engine->stats() : EngineStats{};
    res.status = 200;
    res.set_content(ctx.metrics.render(stats, ctx.served_name()), "text/plain; version=0.0.4; charset=utf-8");
  });

  // Admin: swap the model in place. Unload drops the engine (in-flight requests keep theirs until
  // they end); load builds a new one from the options in the body.
  auto unload = [&ctx](const httplib::Request&, httplib::Response& res) {
    if (!ctx.engine()) throw HttpError(400, "no model is loaded");
    ctx.set_engine(nullptr);
    LOG_INFO("model unloaded (/v1/model/unload)");
    send_json(res, 200, {{"status", "success"}, {"message", "model unloaded"}});
  };
  r.del("/v1/model/unload", unload);
  r.post("/v1/model/unload", unload);
  r.post("/v1/model/load", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (!ctx.factory()) throw HttpError(501, "this server cannot load models");
    std::unique_lock<std::mutex> loading(g_load_mu, std::try_to_lock);
    if (!loading.owns_lock()) throw HttpError(409, "another model load is in progress; try again when it is done");
    if (ctx.engine()) throw HttpError(400, "a model is already loaded; unload it first (/v1/model/unload)");
    EngineConfig cfg = config_from_load_body(req, ctx.engine_config());
    check_model_path_resolves(cfg.model.model);
    std::shared_ptr<EngineClient> e;
    try {
      e = ctx.factory()(cfg);
    } catch (const std::filesystem::filesystem_error& err) {
      // A file the model folder holds or names cannot be read (a symlink loop, a permission):
      // the admin's doing, said with the path they gave, not the file system's.
      LOG_ERROR("/v1/model/load failed: {}", err.what());
      throw HttpError(400,
                      fmt::format("cannot load the model '{}': a file it needs cannot be read ({})", cfg.model.model,
                                  err.code().message()),
                      "model");
    } catch (const std::bad_alloc&) {
      throw HttpError(400,
                      "cannot load the model: the options ask for more memory than this machine can allocate (see "
                      "--num-gpu-blocks-override, --cpu-kvcache-space, --max-model-len)");
    } catch (const std::length_error&) {
      throw HttpError(400, "cannot load the model: the options ask for a buffer larger than can exist");
    } catch (const cypris::Error& err) {
      // A message about an option's value ("--cpu-kvcache-space 64: ...") is safe to show. Others
      // can quote the files the options named (their paths, whether they exist, what they hold):
      // those go to the server's log, for the admin, not to the client.
      const std::string msg = err.what();
      if (msg.rfind("--", 0) == 0 && msg.find('/') == std::string::npos) {
        throw HttpError(400, "cannot load the model: " + msg);
      }
      LOG_ERROR("/v1/model/load failed: {}", msg);
      throw HttpError(400, "cannot load the model from these options; the server log says why", "model");
    }
    if (!e) throw HttpError(500, "the model loader returned no engine");
    warn_about_broken_chat_templates(e->tokenizer(), ctx.cfg().server.chat_template.value_or(""));
    ctx.set_engine(std::move(e), cfg);
    LOG_INFO("model loaded (/v1/model/load): {}", cfg.model.model);
    send_json(res, 200, {{"status", "success"}, {"message", "model loaded"}});
  });
  auto not_yet = [](const std::string& what) {
    return
        [what](const httplib::Request&, httplib::Response&) { throw HttpError(501, what + " is not supported yet"); };
  };
  // LoRA adapters at run time: Aphrodite's /v1/lora/* and vLLM's /v1/(un)load_lora_adapter.
  auto lora_engine = [&ctx]() {
    auto e = ctx.engine();
    if (!e) throw HttpError(503, "no model is loaded");
    if (!e->lora_enabled()) throw HttpError(400, "LoRA adapters need the server started with --enable-lora");
    return e;
  };
  auto load_lora = [lora_engine](const std::string& name, const std::string& path) {
    auto e = lora_engine();
    if (name.empty()) throw HttpError(400, "the LoRA adapter needs a name", "lora_name");
    if (path.empty()) throw HttpError(400, "the LoRA adapter needs a path (a PEFT folder)", "lora_path");
    try {
      e->load_lora(name, path);
    } catch (const std::filesystem::filesystem_error& err) {
      throw HttpError(400, fmt::format("cannot load the LoRA adapter '{}': {}", name, err.code().message()),
                      "lora_path");
    } catch (const cypris::Error& err) {
      throw HttpError(400, fmt::format("cannot load the LoRA adapter '{}': {}", name, err.what()), "lora_path");
    }
    LOG_INFO("LoRA adapter loaded: {} from {}", name, path);
  };
  auto unload_lora = [lora_engine](const std::string& name) {
    auto e = lora_engine();
    if (name.empty()) throw HttpError(400, "name the LoRA adapter to unload", "lora_name");
    if (!e->unload_lora(name)) {
      throw HttpError(404, fmt::format("The LoRA adapter '{}' cannot be found (it is not loaded)", name), "lora_name");
    }
  };
  auto str_field = [](const json& body, std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      auto it = body.find(k);
      if (it == body.end() || it->is_null()) continue;
      if (!it->is_string()) throw HttpError(400, fmt::format("'{}' must be a string", k), k);
      return it->get<std::string>();
    }
    return std::string();
  };
  r.post("/v1/lora/load", [load_lora, str_field](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_json_body(req);
    load_lora(str_field(body, {"name", "lora_name"}), str_field(body, {"path", "lora_path", "local_path"}));
    send_json(res, 200, {{"status", "success"}});
  });
  auto aphrodite_unload = [unload_lora, str_field](const httplib::Request& req, httplib::Response& res) {
    std::string name = req.get_param_value("lora_name");
    if (name.empty() && !req.body.empty()) name = str_field(parse_json_body(req), {"lora_name", "name"});
    unload_lora(name);
    send_json(res, 200, {{"status", "success"}});
  };
  r.del("/v1/lora/unload", aphrodite_unload);
  r.post("/v1/lora/unload", aphrodite_unload);
  r.post("/v1/load_lora_adapter", [load_lora, str_field](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_json_body(req);
    const std::string name = str_field(body, {"lora_name"});
    load_lora(name, str_field(body, {"lora_path"}));
    res.status = 200;
    res.set_content(fmt::format("Success: LoRA adapter '{}' added successfully.", name), "text/plain");
  });
  r.post("/v1/unload_lora_adapter", [unload_lora, str_field](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_json_body(req);
    const std::string name = str_field(body, {"lora_name"});
    unload_lora(name);
    res.status = 200;
    res.set_content(fmt::format("Success: LoRA adapter '{}' removed successfully.", name), "text/plain");
  });
  r.post("/v1/soft_prompt/load", not_yet("soft prompt loading"));
  r.del("/v1/soft_prompt/unload", not_yet("soft prompt unloading"));
}

}  // namespace cypris::server
