// The KoboldAI routes (--launch-kobold-api): /api/v1/* (also /api/latest/*) and /api/extra/*, as
// Aphrodite and KoboldCpp serve them so SillyTavern, Kobold Lite and Horde bridges work. Errors
// carry detail.msg besides the OpenAI error object, since Kobold clients read that.
#include <fmt/format.h>

#include <atomic>
#include <mutex>

#include "app/server/auth.h"
#include "app/server/errors.h"
#include "app/server/kobold/kobold_mapping.h"
#include "app/server/openai/sampling_from_json.h"
#include "app/server/route_util.h"
#include "app/server/router.h"
#include "app/server/sse.h"
#include "engine/common/log.h"

namespace cypris::server {

using nlohmann::json;

namespace {

constexpr int kMaxN = 128;  // SamplingParams allows n <= 128

// Kobold clients read detail.msg; OpenAI-style clients error.message. Send both.
Handler kobold_errors(Handler h) {
  return [h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
    try {
      h(req, res);
    } catch (const HttpError& e) {
      json j = json::parse(error_body(e.status(), e.what(), e.param()));
      j["detail"] = {{"msg", e.what()}, {"type", error_type_for_status(e.status())}};
      send_json(res, e.status(), j);
    }
  };
}

// The bad-words list depends only on the tokenizer: compute it once per tokenizer.
std::vector<int32_t> cached_bad_words(const Tokenizer& tok) {
  static std::mutex mu;
  static const Tokenizer* key = nullptr;
  static std::vector<int32_t> ids;
  std::lock_guard<std::mutex> lock(mu);
  if (key != &tok) {
    ids = kobold_bad_words_ids(tok);
    key = &tok;
  }
  return ids;
}

// Whose generation this is: the API key sent, else the client's address (a server without keys
// cannot tell its users apart any better).
std::string owner_of(const httplib::Request& req) {
  auto key = presented_key(req.get_header_value("Authorization"), req.get_header_value("x-api-key"));
  return key ? "key:" + *key : "addr:" + req.remote_addr;
}

struct KoboldJob {
  std::string owner;
  std::string genkey;
  std::shared_ptr<Submitted> sub;
};

void end_job_streams(ServerContext& ctx, const Submitted& sub) {
  cancel_and_untrack(ctx, sub);
}

// Parses, truncates, submits, and registers the genkey.
KoboldJob start_generation(ServerContext& ctx, const httplib::Request& req) {
  const json body = parse_json_body(req);
  auto engine = ctx.require_engine();
  const Tokenizer* tok = engine->tokenizer();
  const int64_t model_len = engine->model_info().max_model_len;
  KoboldRequest kr = kobold_request_from_json(body, ctx.cfg().server.max_length, model_len > 0 ? model_len : 4096);
  if (kr.grammar_retain_state && kr.params.guided.active()) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      LOG_WARN(
          "Kobold 'grammar_retain_state': true is accepted, but Cypris starts the grammar afresh for every request "
          "(KoboldCpp's behaviour with false); see docs/guided_decoding.md");
    }
  }
  if (kr.use_default_badwordsids && tok) {
    auto bans = cached_bad_words(*tok);
    kr.params.custom_token_bans.insert(kr.params.custom_token_bans.end(), bans.begin(), bans.end());
  }
  check_text_size(ctx, *engine, kr.prompt, "prompt");
  PreparedPrompt p;
  p.text = kr.prompt;
  p.ids = truncate_kobold_prompt(encode_text(tok, kr.prompt, true), kr.max_context_length, kr.max_length, model_len);
  finish_params(kr.params, ctx, *engine);
  compile_guided(kr.params.guided, kr.guided_field);
  KoboldJob job;
  job.owner = owner_of(req);
  // Random when the client names none: a genkey is what /check and /abort act on.
  job.genkey = kr.genkey.value_or(random_genkey());
  // The engine's request id is the server's own, never the client's genkey: two owners may use
  // the same genkey, and ids must not collide.
  const int priority = request_priority(body, ctx);
  job.sub = std::make_shared<Submitted>(submit_prompts(
      ctx, *engine, ctx.new_id("kai"), {p}, std::make_shared<const SamplingParams>(std::move(kr.params)), priority));
  if (!ctx.kobold.add(job.owner, job.genkey, job.sub->streams.front())) {
    end_job_streams(ctx, *job.sub);
    throw HttpError(400, fmt::format("genkey '{}' is already generating", job.genkey), "genkey");
  }
  return job;
}

void end_job(ServerContext& ctx, const KoboldJob& job) {
  cancel_and_untrack(ctx, *job.sub);
  ctx.kobold.remove(job.owner, job.genkey);
}

std::string genkey_of(const httplib::Request& req) {
  if (req.has_param("genkey")) return req.get_param_value("genkey");
  try {
    json b = json::parse(req.body.empty() ? "{}" : req.body);
    if (b.is_object() && b.contains("genkey") && b["genkey"].is_string()) return b["genkey"].get<std::string>();
  } catch (const json::exception&) {
  }
  return "";
}

}  // namespace

void register_kobold_routes(Router& r) {
  ServerContext& ctx = r.ctx;
  // /api/v1/X is also served as /api/latest/X.
  auto kai_get = [&r](const std::string& rest, Handler h) {
    r.get("/api/v1" + rest, kobold_errors(h));
    r.get("/api/latest" + rest, kobold_errors(h));
  };
  auto kai_post = [&r](const std::string& rest, Handler h) {
    r.post("/api/v1" + rest, kobold_errors(h));
    r.post("/api/latest" + rest, kobold_errors(h));
  };
  auto value_of = [](json v) {
    return [v](const httplib::Request&, httplib::Response& res) { send_json(res, 200, v); };
  };

  kai_post("/generate", [&ctx](const httplib::Request& req, httplib::Response& res) {
    KoboldJob job = start_generation(ctx, req);
    std::vector<std::string> texts;
    const DrainResult r = drain_outputs(ctx, *job.sub, connection_probe(req), [&](size_t, const RequestOutput& out) {
      for (auto& d : out.outputs) {
        if (d.index < 0 || d.index >= kMaxN) continue;
        if (texts.size() <= size_t(d.index)) texts.resize(size_t(d.index) + 1);
        texts[size_t(d.index)] += d.text;
        if (d.index == 0) ctx.kobold.append(job.owner, job.genkey, d.text);
      }
      return true;
    });
    end_job(ctx, job);
    throw_if_failed(r);
    json results = json::array();
    for (auto& t : texts) results.push_back({{"text", t}});
    if (results.empty()) results.push_back({{"text", ""}});
    send_json(res, 200, {{"results", results}});
  });

  r.post("/api/extra/generate/stream", kobold_errors([&ctx](const httplib::Request& req, httplib::Response& res) {
           KoboldJob job = start_generation(ctx, req);
           ServerContext* c = &ctx;
           start_event_stream(
               req, res,
               [c, job](const SseWrite& write) {
                 // An empty write probes the client while the engine is busy.
                 const DrainResult r =
                     drain_outputs(*c, *job.sub, [&] { return write(""); }, [&](size_t, const RequestOutput& out) {
                       for (auto& d : out.outputs) {
                         if (d.index != 0) continue;  // Kobold streams carry one output
                         c->kobold.append(job.owner, job.genkey, d.text);
                         if (d.text.empty()) continue;
                         if (!write(sse_event("message", dump_json({{"token", d.text}})))) return false;
                       }
                       return true;
                     });
                 if (r.error) write(sse_event("message", dump_json({{"token", ""}, {"error", *r.error}})));
                 if (r.server_stopping && !r.error) {
                   write(sse_event("message", dump_json({{"token", ""}, {"error", "the server is shutting down"}})));
                 }
               },
               [c, job] { end_job(*c, job); });
         }));

  auto check = kobold_errors([&ctx](const httplib::Request& req, httplib::Response& res) {
    const std::string key = genkey_of(req);
    std::optional<std::string> text;
    if (!key.empty()) text = ctx.kobold.partial(owner_of(req), key);
    send_json(res, 200, {{"results", json::array({{{"text", text.value_or("")}}})}});
  });
  r.get("/api/extra/generate/check", check);
  r.post("/api/extra/generate/check", check);

  r.post("/api/extra/abort", kobold_errors([&ctx](const httplib::Request& req, httplib::Response& res) {
           const std::string key = genkey_of(req);
           // No genkey (SillyTavern sends an empty body): stop this owner's generations, as KoboldCpp
           // stops its one running generation; never another key's.
           const std::string owner = owner_of(req);
           const int n = key.empty() ? ctx.kobold.abort_owner(owner) : ctx.kobold.abort(owner, key);
           send_json(res, 200, {{"success", n > 0}, {"aborted", n}});
         }));

  r.post("/api/extra/tokencount", kobold_errors([&ctx](const httplib::Request& req, httplib::Response& res) {
           const json body = parse_json_body(req);
           auto engine = ctx.require_engine();
           auto it = body.find("prompt");
           if (it == body.end() || !it->is_string()) throw HttpError(400, "'prompt' must be a string", "prompt");
           check_text_size(ctx, *engine, it->get_ref<const std::string&>(), "prompt");
           auto ids = encode_text(engine->tokenizer(), it->get_ref<const std::string&>(), true);
           if (static_cast<int64_t>(ids.size()) > max_text_tokens(ctx, *engine)) {
             throw HttpError(400,
                             fmt::format("the prompt is {} tokens; this server counts at most {} (--max-tokenize-tokens)",
                                         ids.size(), max_text_tokens(ctx, *engine)),
                             "prompt");
           }
           std::string list = "[";
           for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
           res.status = 200;
           res.set_content(fmt::format("{{\"value\":{},\"ids\":{}]}}", ids.size(), list), "application/json");
         }));

  kai_get("/model", [&ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"result", "cypris/" + ctx.served_name()}});
  });
  kai_get("/info/version", value_of({{"result", "1.2.4"}}));
  // SillyTavern compares .result with version numbers; "KoboldCpp" sorts above all of them and so
  // turns on every feature (streaming, abort, tokencount, min_p, ...).
  r.get("/api/extra/version", value_of({{"result", "KoboldCpp"}, {"version", "1.63"}}));
  kai_get("/config/max_length", [&ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"value", ctx.cfg().server.max_length}});
  });
  auto ctx_len = [&ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"value", ctx.require_engine()->model_info().max_model_len}});
  };
  kai_get("/config/max_context_length", ctx_len);
  r.get("/api/extra/true_max_context_length", kobold_errors(ctx_len));
  kai_get("/config/soft_prompts_list", value_of({{"values", json::array()}}));
  kai_get("/config/soft_prompt", value_of({{"value", ""}}));
  r.get("/api/extra/preloadstory", value_of(json::object()));
}

}  // namespace cypris::server
