// POST /v1/chat/completions: chat messages rendered with the chat template, then generated like a
// completion; streaming sends a role chunk per choice, content deltas, and a final chunk with
// finish_reason, then data: [DONE]. With tools (chat_tools.h), tool_choice "required" or a named
// function is enforced by a grammar, and the output is read into tool_calls by a tool-call parser
// (tool_parsers.h); streamed, each call's first delta has its index, id, type and name, and later
// ones append to its arguments.
#include <fmt/format.h>

#include <functional>

#include "app/server/errors.h"
#include "app/server/openai/chat_prompt.h"
#include "app/server/openai/chat_tools.h"
#include "app/server/openai/choices.h"
#include "app/server/openai/routes.h"
#include "app/server/openai/sampling_from_json.h"
#include "app/server/openai/tool_parsers.h"
#include "app/server/route_util.h"
#include "app/server/router.h"
#include "app/server/sse.h"

namespace cypris::server {

using nlohmann::json;

namespace {

json opt_json(const std::optional<std::string>& s) {
  return s ? json(*s) : json(nullptr);
}

// Streams one output of a choice whose text is read for tool calls: content deltas, a call's first
// delta (index, id, type, name), its arguments pieces, and with the finish its reason ("tool_calls"
// for "stop" once a call was made, except for a named function). lp: this output's logprobs (null: none).
bool write_tool_deltas(const CompletionDelta& d, ToolCallParser& parser, ToolCallFormat format, bool parallel,
                       const json& lp, const std::function<bool(json)>& send) {
  std::vector<ToolStreamEvent> events = parser.feed(d.text);
  if (d.finish_reason) {
    for (auto& e : parser.finish(*d.finish_reason == "length")) events.push_back(std::move(e));
  }
  bool lp_sent = lp.is_null() || d.logprobs.empty();
  for (auto& e : events) {
    if (!parallel && e.kind != ToolStreamEvent::Kind::Content && e.index > 0) continue;
    json delta;
    if (e.kind == ToolStreamEvent::Kind::Content) {
      delta = {{"content", e.text}};
    } else if (e.kind == ToolStreamEvent::Kind::CallBegin) {
      delta = {{"tool_calls", json::array({{{"index", e.index},
                                            {"id", new_tool_call_id()},
                                            {"type", "function"},
                                            {"function", {{"name", e.text}, {"arguments", ""}}}}})}};
    } else {
      delta = {{"tool_calls", json::array({{{"index", e.index}, {"function", {{"arguments", e.text}}}}})}};
    }
    json one = {
        {"index", d.index}, {"delta", delta}, {"logprobs", lp_sent ? json(nullptr) : lp}, {"finish_reason", nullptr}};
    lp_sent = true;
    if (!send(std::move(one))) return false;
  }
  if (!d.finish_reason) {
    if (lp_sent) return true;
    return send({{"index", d.index}, {"delta", json::object()}, {"logprobs", lp}, {"finish_reason", nullptr}});
  }
  std::string reason = *d.finish_reason;
  if (parser.calls() > 0 && format != ToolCallFormat::Named && reason == "stop") reason = "tool_calls";
  return send({{"index", d.index},
               {"delta", json::object()},
               {"logprobs", lp_sent ? json(nullptr) : lp},
               {"finish_reason", reason},
               {"stop_reason", opt_json(d.stop_reason)}});
}

}  // namespace

std::string chat_prompt_of(const json& body, const std::string& raw, const Tokenizer* tok, const ServerContext& ctx,
                           bool default_gen_prompt, std::string* used_source) {
  if (!body.contains("messages")) throw HttpError(400, "'messages' is required", "messages");
  const nlohmann::ordered_json ob = nlohmann::ordered_json::parse(raw, nullptr, false);
  if (ob.is_discarded() || !ob.is_object()) throw HttpError(400, "request body must be a JSON object");
  ChatPromptInputs in;
  in.add_generation_prompt = get_bool(body, "add_generation_prompt", default_gen_prompt);
  in.template_override = get_string(body, "chat_template", "");
  in.server_template = ctx.cfg().server.chat_template.value_or("");
  if (auto it = ob.find("tools"); it != ob.end() && it->is_array()) in.tools = *it;
  if (auto it = ob.find("documents"); it != ob.end() && it->is_array()) in.documents = *it;
  if (auto it = ob.find("chat_template_kwargs"); it != ob.end() && !it->is_null()) {
    if (!it->is_object()) throw HttpError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs");
    in.template_kwargs = *it;
  }
  return render_chat_prompt(ob["messages"], tok, in, used_source);
}

void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req);
  const ServerOptions& sopts = ctx.cfg().server;
  const ChatTools tools = tools_from_json(nlohmann::ordered_json::parse(req.body, nullptr, false), sopts);
  std::string guided_field;
  GuidedDecodingParams guided = guided_fields_from_json(body, &guided_field);  // compiled below, after cheap checks
  std::optional<std::string> ws_pattern;
  if (const std::string w = get_string(body, "guided_whitespace_pattern", ""); !w.empty()) ws_pattern = w;
  bool tool_grammar = false;
  if (GuidedDecodingParams tg = tool_guided_params(tools, ws_pattern, /*compile=*/false); tg.active()) {
    tool_grammar = true;
    if (guided.active()) {
      throw HttpError(400,
                      "'tool_choice' \"required\" or a named function is enforced by a grammar; it cannot be "
                      "combined with guided decoding (guided_*, response_format, grammar)",
                      "tool_choice");
    }
    guided = std::move(tg);
  }
  auto engine = ctx.require_engine();
  const Tokenizer* tok = engine->tokenizer();
  // vLLM's return_tokens_as_token_ids: logprob tokens as "token_id:N" (what the formatters write
  // without a tokenizer), so tokens that render alike (byte fallbacks shown as U+FFFD) stay apart.
  const Tokenizer* lp_tok = get_bool(body, "return_tokens_as_token_ids", false) ? nullptr : tok;
  std::string template_source;
  const std::string prompt_text = chat_prompt_of(body, req.body, tok, ctx, true, &template_source);
  const std::optional<ToolCallFormat> tool_format = tool_output_format(tools, sopts, template_source);

  // logprobs is a bool here; top_logprobs says how many alternatives.
  SamplingParams params = sampling_from_json(body, SamplingDefaults{std::nullopt, 0.7f}, {"logprobs"});
  params.guided = std::move(guided);
  const bool want_logprobs = get_bool(body, "logprobs", false);
  const int64_t top_logprobs = get_int(body, "top_logprobs", 0);
  if (top_logprobs < 0 || top_logprobs > 20) {
    throw HttpError(400, fmt::format("'top_logprobs' must be in [0, 20], got {}", top_logprobs), "top_logprobs");
  }
  if (top_logprobs > 0 && !want_logprobs) {
    throw HttpError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
  }
  if (want_logprobs) params.logprobs = static_cast<int>(top_logprobs);
  const bool stream = get_bool(body, "stream", false);
  const bool include_usage = stream_include_usage(body);
  const bool add_special = get_bool(body, "add_special_tokens", false);  // the template writes BOS itself
  const bool echo = get_bool(body, "echo", false);

  check_text_size(ctx, *engine, prompt_text, "messages");
  PreparedPrompt prompt;
  prompt.text = prompt_text;
  prompt.ids = encode_text(tok, prompt_text, add_special);
  const bool truncated = params.truncate_prompt_tokens && prompt.ids.size() > size_t(*params.truncate_prompt_tokens);
  if (truncated) prompt.ids.erase(prompt.ids.begin(), prompt.ids.end() - *params.truncate_prompt_tokens);
  // --context-shift keeps the system prompt at every shift, unless the request names its own n_keep.
  if (engine->model_info().context_shift && !params.n_keep && !truncated) {
    const nlohmann::ordered_json ob = nlohmann::ordered_json::parse(req.body, nullptr, false);
    if (ob.is_object() && ob.contains("messages")) {
      ChatPromptInputs in;
      in.template_override = get_string(body, "chat_template", "");
      in.server_template = ctx.cfg().server.chat_template.value_or("");
      if (auto it = ob.find("tools"); it != ob.end() && it->is_array()) in.tools = *it;
      if (auto it = ob.find("documents"); it != ob.end() && it->is_array()) in.documents = *it;
      if (auto it = ob.find("chat_template_kwargs"); it != ob.end() && it->is_object()) in.template_kwargs = *it;
      params.n_keep = system_prompt_tokens(ob["messages"], tok, in, prompt.ids,
                                           [&](const std::string& text) { return encode_text(tok, text, add_special); });
    }
  }
  const int64_t max_len = engine->model_info().max_model_len;
  if (!params.max_tokens && max_len > 0) {
    // No max_tokens: the rest of the context (at least one token so the length error names the prompt).
    params.max_tokens = static_cast<int>(std::max<int64_t>(1, max_len - static_cast<int64_t>(prompt.ids.size())));
  }
  finish_params(params, ctx, *engine);
  if (params.guided.active()) {
    check_fits_context(*engine, prompt.ids.size(), params);
    if (tool_grammar) {
      tool_guided_params(tools, ws_pattern);  // compiles: a 400 naming 'tools'
    } else {
      compile_guided(params.guided, guided_field);
    }
  }
  const int n = params.n;

  // echo: the last message's content when it is the assistant's (continuing a reply).
  std::string echo_text;
  const std::string role = ctx.cfg().server.response_role;
  if (echo) {
    const json& last = body["messages"].back();
    if (last.value("role", std::string()) == role && last.contains("content")) {
      echo_text = message_text(last["content"], body["messages"].size() - 1);
    }
  }

  const std::string id = ctx.new_id("chatcmpl");
  const int64_t created = unix_time_now();
  const std::string lora = request_lora(body, ctx, *engine);
  const std::string model = lora.empty() ? ctx.served_name() : lora;
  auto sub = std::make_shared<Submitted>(submit_prompts(ctx, *engine, id, {prompt},
                                                        std::make_shared<const SamplingParams>(std::move(params)),
                                                        request_priority(body, ctx), lora));
  auto choices = std::make_shared<Choices>(1, n);
  const int top_n = static_cast<int>(top_logprobs);

  if (!stream) {
    const DrainResult r = drain_outputs(ctx, *sub, connection_probe(req), [&](size_t si, const RequestOutput& out) {
      choices->add(si, out);
      return true;
    });
    untrack_all(ctx, *sub);
    throw_if_failed(r);
    const int64_t prompt_tokens = r.prompt_tokens, completion_tokens = r.completion_tokens;
    json jc = json::array();
    for (size_t i = 0; i < choices->size(); ++i) {
      ChoiceState& c = (*choices)[i];
      json lp = nullptr;
      if (want_logprobs) lp = {{"content", chat_logprobs_content(lp_tok, c.logprobs, top_n)}};
      json message = {{"role", role}, {"content", echo_text + c.text}, {"tool_calls", json::array()}};
      std::optional<std::string> finish = c.finish_reason;
      if (tool_format) {
        // Cut by max_tokens: the calls completed before the cut are returned, the unfinished one not.
        ParsedToolOutput parsed = parse_tool_calls(*tool_format, c.text, tools.named, finish == "length");
        if (!tools.parallel && parsed.calls.size() > 1) parsed.calls.resize(1);
        if (!parsed.calls.empty()) {
          for (const auto& call : parsed.calls) {
            message["tool_calls"].push_back(tool_call_json(new_tool_call_id(), call.name, call.arguments));
          }
          const std::string content = echo_text + parsed.content.value_or("");
          message["content"] = content.empty() ? json(nullptr) : json(content);
          // A named function keeps the engine's reason (as vLLM; OpenAI says "stop" there too); an
          // answer cut by max_tokens stays "length".
          if (*tool_format != ToolCallFormat::Named && finish == "stop") finish = "tool_calls";
        }
      }
      jc.push_back({{"index", i},
                    {"message", std::move(message)},
                    {"logprobs", lp},
                    {"finish_reason", opt_json(finish)},
                    {"stop_reason", opt_json(c.stop_reason)}});
    }
    send_json(res, 200,
              {{"id", id},
               {"object", "chat.completion"},
               {"created", created},
               {"model", model},
               {"choices", jc},
               {"usage", usage_json(prompt_tokens, completion_tokens)}});
    return;
  }

  // One tool-call parser per choice when the output is to be read for tool calls.
  auto parsers = std::make_shared<std::vector<ToolCallParser>>();
  if (tool_format) {
    for (int i = 0; i < n; ++i) parsers->emplace_back(*tool_format, true, tools.named);
  }
  const bool parallel = tools.parallel;
  ServerContext* c = &ctx;
  start_event_stream(
      req, res,
      [c, sub, choices, want_logprobs, top_n, include_usage, id, created, model, tok, lp_tok, engine, role, echo_text,
       parsers, tool_format, parallel](const SseWrite& write) {
        auto chunk = [&](json choices_json, json usage) {
          json j = {{"id", id},
                    {"object", "chat.completion.chunk"},
                    {"created", created},
                    {"model", model},
                    {"choices", std::move(choices_json)}};
          if (!usage.is_null()) j["usage"] = std::move(usage);
          return sse_data(dump_json(j));
        };
        // The role chunk of every choice first, as OpenAI does.
        for (size_t i = 0; i < choices->size(); ++i) {
          json delta = {{"role", role}};
          if (!echo_text.empty()) delta["content"] = echo_text;
          if (!write(chunk(
                  json::array({{{"index", i}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}),
                  nullptr))) {
            return;  // on_end cancels
          }
        }
        // An empty write probes the client while the engine is busy.
        const DrainResult r = drain_outputs(
            *c, *sub, [&] { return write(""); },
            [&](size_t si, const RequestOutput& out) {
              for (auto& d : out.outputs) {
                const std::optional<size_t> at = choices->index_of(si, d);
                if (!at) continue;
                if (!parsers->empty()) {
                  const json lp =
                      want_logprobs ? json{{"content", chat_logprobs_content(lp_tok, d.logprobs, top_n)}} : json();
                  auto send = [&](json one) { return write(chunk(json::array({std::move(one)}), nullptr)); };
                  if (!write_tool_deltas(d, (*parsers)[size_t(d.index)], *tool_format, parallel, lp, send))
                    return false;
                  continue;
                }
                if (!worth_a_chunk(d.text, d, tok != nullptr)) continue;
                json delta = json::object();
                if (!d.text.empty() || !d.finish_reason) delta["content"] = d.text;
                json lp = nullptr;
                if (want_logprobs) lp = {{"content", chat_logprobs_content(lp_tok, d.logprobs, top_n)}};
                json one = {{"index", d.index},
                            {"delta", delta},
                            {"logprobs", lp},
                            {"finish_reason", opt_json(d.finish_reason)}};
                if (d.finish_reason) one["stop_reason"] = opt_json(d.stop_reason);
                if (d.finish_reason) (*choices)[*at].finish_reason = d.finish_reason;
                if (!write(chunk(json::array({one}), nullptr))) return false;
              }
              return true;
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
