// POST /v1/completions: the OpenAI legacy completion API with Aphrodite's sampler set, streaming
// (SSE, always ending with data: [DONE]) and not, n > 1, several prompts, echo and logprobs.
#include <fmt/format.h>

#include "app/server/errors.h"
#include "app/server/openai/choices.h"
#include "app/server/route_util.h"
#include "app/server/openai/routes.h"
#include "app/server/openai/sampling_from_json.h"
#include "app/server/router.h"
#include "app/server/sse.h"

namespace cypris::server {

using nlohmann::json;

namespace {

json opt_json(const std::optional<std::string>& s) {
  return s ? json(*s) : json(nullptr);
}

// stop_reason: Aphrodite sends a stop token id as a number.
json stop_reason_json(const std::optional<std::string>& s) {
  if (!s) return nullptr;
  if (!s->empty() && s->find_first_not_of("0123456789") == std::string::npos && s->size() < 10) return std::stoi(*s);
  return *s;
}

}  // namespace

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req);
  if (body.contains("suffix") && !body["suffix"].is_null()) {
    throw HttpError(400, "'suffix' is not supported", "suffix");
  }
  if (!body.contains("prompt")) throw HttpError(400, "'prompt' is required", "prompt");
  std::string guided_field;
  GuidedDecodingParams guided = guided_fields_from_json(body, &guided_field);  // compiled below, after cheap checks
  auto engine = ctx.require_engine();
  const Tokenizer* tok = engine->tokenizer();
  // vLLM's return_tokens_as_token_ids: logprob tokens as "token_id:N" (what the formatters write
  // without a tokenizer), so tokens that render alike (byte fallbacks shown as U+FFFD) stay apart.
  const Tokenizer* lp_tok = get_bool(body, "return_tokens_as_token_ids", false) ? nullptr : tok;

  SamplingParams params = sampling_from_json(body, SamplingDefaults{16, 1.0f});
  params.guided = std::move(guided);
  const bool stream = get_bool(body, "stream", false);
  const bool echo = get_bool(body, "echo", false);
  const bool include_usage = stream_include_usage(body);
  const bool add_special = get_bool(body, "add_special_tokens", false);  // Aphrodite adds no BOS by default
  if (echo && params.logprobs && !params.prompt_logprobs) params.prompt_logprobs = params.logprobs;

  // Each text, the number of prompts and their bytes within what the server takes, before any is
  // tokenized; then their tokens in all.
  if (body["prompt"].is_string()) check_text_size(ctx, *engine, body["prompt"].get_ref<const std::string&>(), "prompt");
  check_prompt_list(ctx, *engine, body["prompt"]);
  std::vector<PreparedPrompt> prompts = prompts_from_json(body["prompt"], tok, add_special);
  check_request_tokens(ctx, *engine, prompts);
  if (params.truncate_prompt_tokens) {
    for (auto& p : prompts) {
      const size_t k = static_cast<size_t>(*params.truncate_prompt_tokens);
      if (p.ids.size() > k) p.ids.erase(p.ids.begin(), p.ids.end() - static_cast<ptrdiff_t>(k));
    }
  }
  finish_params(params, ctx, *engine);
  if (params.guided.active()) {
    for (const auto& p : prompts) check_fits_context(*engine, p.ids.size(), params);
    compile_guided(params.guided, guided_field);
  }
  const int n = params.n;
  const int top_n = params.logprobs.value_or(0);
  const bool want_logprobs = params.logprobs.has_value();
  // Aphrodite: with best_of != n or beam search, the whole response comes as one event.
  const bool one_event = params.use_beam_search || params.effective_best_of() != params.n;
  auto shared_params = std::make_shared<const SamplingParams>(std::move(params));

  const std::string id = ctx.new_id("cmpl");
  const int64_t created = unix_time_now();
  const std::string lora = request_lora(body, ctx, *engine);
  const std::string model = lora.empty() ? ctx.served_name() : lora;
  auto sub = std::make_shared<Submitted>(
      submit_prompts(ctx, *engine, id, prompts, shared_params, request_priority(body, ctx), lora));
  (void)top_n;

  auto choices = std::make_shared<Choices>(prompts.size(), n);
  auto prompt_text = [prompts](size_t choice_idx, int n_) { return prompts[choice_idx / size_t(n_)].text; };

  if (!stream) {
    std::vector<std::vector<PositionLogprobs>> prompt_lps(prompts.size());
    const DrainResult r = drain_outputs(ctx, *sub, connection_probe(req), [&](size_t si, const RequestOutput& out) {
      if (!out.prompt_logprobs.empty()) prompt_lps[si] = out.prompt_logprobs;
      choices->add(si, out);
      return true;
    });
    untrack_all(ctx, *sub);
    throw_if_failed(r);
    const int64_t prompt_tokens = r.prompt_tokens, completion_tokens = r.completion_tokens;
    json jchoices = json::array();
    for (size_t i = 0; i < choices->size(); ++i) {
      ChoiceState& c = (*choices)[i];
      const size_t pi = i / size_t(n);
      std::string text = echo ? prompts[pi].text + c.text : c.text;
      json lp = nullptr;
      if (want_logprobs) {
        size_t off = 0;
        std::vector<PositionLogprobs> all;
        if (echo) {
          // Prompt positions: the engine gives logprobs for positions after the first.
          const auto& plp = prompt_lps[pi];
          const auto& ids = prompts[pi].ids;
          const size_t first_with = ids.size() >= plp.size() ? ids.size() - plp.size() : 0;
          for (size_t k = 0; k < ids.size(); ++k) {
            PositionLogprobs p;
            p.token_id = ids[k];
            if (k >= first_with && k - first_with < plp.size()) p = plp[k - first_with];
            all.push_back(p);
          }
          lp = completion_logprobs(lp_tok, all, off);
          for (size_t k = 0; k < first_with && k < lp["token_logprobs"].size(); ++k) {
            lp["token_logprobs"][k] = nullptr;
            lp["top_logprobs"][k] = nullptr;
          }
          json gen = completion_logprobs(lp_tok, c.logprobs, off);
          for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
            for (auto& e : gen[key]) lp[key].push_back(e);
          }
        } else {
          lp = completion_logprobs(lp_tok, c.logprobs, off);
        }
      }
      jchoices.push_back({{"index", i},
                          {"text", text},
                          {"logprobs", lp},
                          {"finish_reason", opt_json(c.finish_reason)},
                          {"stop_reason", stop_reason_json(c.stop_reason)},
                          {"prompt_logprobs", nullptr}});
    }
    send_json(res, 200,
              {{"id", id},
               {"object", "text_completion"},
               {"created", created},
               {"model", model},
               {"choices", jchoices},
               {"usage", usage_json(prompt_tokens, completion_tokens)}});
    return;
  }

  ServerContext* c = &ctx;
  start_event_stream(
      req, res,
      [c, sub, choices, n, echo, want_logprobs, include_usage, one_event, id, created, model, tok, lp_tok, engine,
       prompt_text](const SseWrite& write) {
        auto chunk = [&](json choices_json, json usage) {
          return sse_data(dump_json({{"id", id},
                                     {"object", "text_completion"},
                                     {"created", created},
                                     {"model", model},
                                     {"choices", std::move(choices_json)},
                                     {"usage", std::move(usage)}}));
        };
        // An empty write while the engine is busy finds out whether the client is still there.
        const DrainResult r = drain_outputs(*c, *sub, [&] { return write(""); }, [&](size_t si, const RequestOutput& out) {
          json together = json::array();  // one_event: this output's choices in one chunk
          for (auto& d : out.outputs) {
            const std::optional<size_t> at = choices->index_of(si, d);
            if (!at) continue;
            const size_t ci = *at;
            ChoiceState& ch = (*choices)[ci];
            std::string text = d.text;
            if (!ch.started) {
              ch.started = true;
              if (echo) {
                text = prompt_text(ci, n) + text;
                ch.text_offset = prompt_text(ci, n).size();
              }
            }
            // Nothing to say (a held-back stop string) and not the end: no chunk.
            if (!worth_a_chunk(text, d, tok != nullptr)) continue;
            json lp = nullptr;
            if (want_logprobs) lp = completion_logprobs(lp_tok, d.logprobs, ch.text_offset);
            json one = {{"index", ci},
                        {"text", text},
                        {"logprobs", lp},
                        {"finish_reason", opt_json(d.finish_reason)},
                        {"stop_reason", stop_reason_json(d.stop_reason)}};
            if (d.finish_reason) ch.finish_reason = d.finish_reason;
            if (one_event) {
              together.push_back(std::move(one));
            } else if (!write(chunk(json::array({one}), nullptr))) {
              return false;
            }
          }
          return together.empty() || write(chunk(std::move(together), nullptr));
        });
        if (r.client_gone) return;
        if (write_openai_stream_error(write, r)) return;
        if (include_usage) {
          write(chunk(json::array(), usage_json(r.prompt_tokens, r.completion_tokens)));
        }
        write(std::string(kSseDone));
      },
      [c, sub] { cancel_and_untrack(*c, *sub); });
}

}  // namespace cypris::server
