// The OpenAI-side routes other than generation: models, tokenize/detokenize, health, version,
// service info, metrics, and the admin routes that load and unload the model.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "app/server/errors.h"
#include "app/server/route_util.h"
#include "app/server/openai/routes.h"
#include "app/server/router.h"
#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/config/options.h"

namespace cypris::server {

using nlohmann::json;

std::string chat_prompt_of(const json& body, const std::string& raw, const Tokenizer* tok, const ServerContext& ctx,
                           bool default_gen_prompt);

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
  return data;
}

json tokenize(ServerContext& ctx, const json& body, const std::string& raw) {
  auto engine = ctx.require_engine();
  const Tokenizer* tok = engine->tokenizer();
  if (!tok) throw HttpError(400, "this model was loaded with --skip-tokenizer-init: there is no tokenizer");
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    const std::string text = chat_prompt_of(body, raw, tok, ctx, true);
    ids = tok->encode(text, get_bool(body, "add_special_tokens", false));
  } else {
    auto it = body.find("prompt");
    if (it == body.end() || !it->is_string()) throw HttpError(400, "'prompt' must be a string", "prompt");
    ids = tok->encode(it->get<std::string>(), get_bool(body, "add_special_tokens", true));
  }
  return {{"tokens", ids},
          {"count", ids.size()},
          {"max_model_len", engine->model_info().max_model_len},
          // v0.5-style and KoboldCpp-style clients read these.
          {"value", ids.size()},
          {"ids", ids}};
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
  // load_options_file reads YAML and JSON with the same checks as --config.
  char path[] = "/tmp/cypris-model-load-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) throw HttpError(500, "cannot create a temporary file for the options");
  close(fd);
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  EngineConfig cfg = base;
  try {
    load_options_file(path, cfg);
    std::filesystem::remove(path);
  } catch (...) {
    std::filesystem::remove(path);
    throw;
  }
  validate_options(cfg);
  if (cfg.model.model.empty()) throw HttpError(400, "the options must name a 'model'", "model");
  return cfg;
}

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
  r.post("/v1/tokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    send_json(res, 200, tokenize(ctx, parse_json_body(req), req.body));
  });
  r.post("/v1/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_json_body(req);
    if (!body.contains("tokens")) throw HttpError(400, "'tokens' is required", "tokens");
    send_json(res, 200, {{"prompt", detokenize(ctx, body["tokens"])}});
  });
  // Aphrodite v0.5 names.
  r.post("/v1/token/encode", [&ctx](const httplib::Request& req, httplib::Response& res) {
    json out = tokenize(ctx, parse_json_body(req), req.body);
    send_json(res, 200, {{"value", out["count"]}, {"ids", out["tokens"]}});
  });
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
    if (ctx.engine()) throw HttpError(400, "a model is already loaded; unload it first (/v1/model/unload)");
    EngineConfig cfg = config_from_load_body(req, ctx.engine_config());
    std::shared_ptr<EngineClient> e;
    try {
      e = ctx.factory()(cfg);
    } catch (const cypris::Error& err) {
      throw HttpError(400, std::string("cannot load the model: ") + err.what(), "model");
    }
    if (!e) throw HttpError(500, "the model loader returned no engine");
    ctx.set_engine(std::move(e), cfg);
    LOG_INFO("model loaded (/v1/model/load): {}", cfg.model.model);
    send_json(res, 200, {{"status", "success"}, {"message", "model " + cfg.model.model + " loaded"}});
  });
  auto not_yet = [](const std::string& what) {
    return
        [what](const httplib::Request&, httplib::Response&) { throw HttpError(501, what + " is not supported yet"); };
  };
  r.post("/v1/lora/load", not_yet("LoRA loading"));
  r.del("/v1/lora/unload", not_yet("LoRA unloading"));
  r.post("/v1/lora/unload", not_yet("LoRA unloading"));
  r.post("/v1/soft_prompt/load", not_yet("soft prompt loading"));
  r.del("/v1/soft_prompt/unload", not_yet("soft prompt unloading"));
}

}  // namespace cypris::server
