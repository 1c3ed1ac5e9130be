#include "app/server/route_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "app/server/connection_guard.h"
#include "app/server/errors.h"
#include "app/server/sse.h"
#include "app/server/openai/sampling_from_json.h"
#include "engine/common/error.h"
#include "engine/core/stats.h"

namespace cypris::server {

using nlohmann::json;

std::vector<int32_t> encode_text(const Tokenizer* tok, const std::string& text, bool add_special) {
  if (!tok) {
    throw HttpError(400, "this model was loaded with --skip-tokenizer-init: send the prompt as token ids", "prompt");
  }
  return tok->encode(text, add_special);
}

static std::vector<int32_t> ids_from_json(const json& a, const Tokenizer* tok) {
  std::vector<int32_t> ids;
  const int64_t vocab = tok ? tok->vocab_size() : INT32_MAX;
  for (const auto& e : a) {
    if (!e.is_number_integer()) throw HttpError(400, "'prompt' token ids must be integers", "prompt");
    int64_t v = e.get<int64_t>();
    if (v < 0 || v >= vocab) {
      throw HttpError(400, fmt::format("'prompt' contains token id {}, outside the vocabulary [0, {})", v, vocab),
                      "prompt");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

std::vector<PreparedPrompt> prompts_from_json(const json& prompt, const Tokenizer* tok, bool add_special) {
  std::vector<PreparedPrompt> out;
  auto from_ids = [&](const json& a) {
    PreparedPrompt p;
    p.ids = ids_from_json(a, tok);
    if (tok) p.text = tok->decode(p.ids, false);
    out.push_back(std::move(p));
  };
  auto from_text = [&](const std::string& s) {
    PreparedPrompt p;
    p.text = s;
    p.ids = encode_text(tok, s, add_special);
    out.push_back(std::move(p));
  };
  if (prompt.is_string()) {
    from_text(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty()) {
    if (prompt[0].is_number()) {
      from_ids(prompt);
    } else {
      for (const auto& e : prompt) {
        if (e.is_string()) {
          from_text(e.get<std::string>());
        } else if (e.is_array() && !e.empty()) {
          from_ids(e);
        } else {
          throw HttpError(400,
                          "'prompt' must be a string, a list of strings, a list of token ids or a list of "
                          "lists of token ids",
                          "prompt");
        }
      }
    }
  } else {
    throw HttpError(400,
                    "'prompt' must be a non-empty string, list of strings, list of token ids or list of lists "
                    "of token ids",
                    "prompt");
  }
  for (const auto& p : out) {
    if (p.ids.empty()) throw HttpError(400, "'prompt' is empty after tokenization", "prompt");
  }
  return out;
}

int64_t max_text_tokens(const ServerContext& ctx, const EngineClient& engine) {
  if (ctx.cfg().server.max_tokenize_tokens > 0) return ctx.cfg().server.max_tokenize_tokens;
  const int64_t len = engine.model_info().max_model_len;
  return len > 0 ? 4 * len : int64_t{1} << 20;
}

size_t max_text_bytes(const ServerContext& ctx, const EngineClient& engine) {
  return static_cast<size_t>(max_text_tokens(ctx, engine)) * 16;
}

void check_text_size(const ServerContext& ctx, const EngineClient& engine, const std::string& text, const char* field) {
  const size_t limit = max_text_bytes(ctx, engine);
  if (text.size() > limit) {
    throw HttpError(400,
                    fmt::format("'{}' is {} bytes long; this server tokenizes at most {} bytes per text (16 per token "
                                "of --max-tokenize-tokens {})",
                                field, text.size(), limit, max_text_tokens(ctx, engine)),
                    std::string(field));
  }
}

int64_t max_request_tokens(const ServerContext& ctx, const EngineClient& engine) {
  if (ctx.cfg().server.max_request_tokens > 0) return ctx.cfg().server.max_request_tokens;
  const int64_t len = engine.model_info().max_model_len;
  return len > 0 ? 16 * len : int64_t{1} << 20;
}

void check_prompt_list(const ServerContext& ctx, const EngineClient& engine, const json& prompt) {
  if (!prompt.is_array() || prompt.empty() || prompt[0].is_number()) return;  // one prompt
  const int64_t max_prompts = ctx.cfg().server.max_prompts_per_request;
  if (static_cast<int64_t>(prompt.size()) > max_prompts) {
    throw HttpError(400,
                    fmt::format("'prompt' is a list of {} prompts; this server takes at most {} in one request "
                                "(--max-prompts-per-request)",
                                prompt.size(), max_prompts),
                    "prompt");
  }
  const int64_t max_tokens = max_request_tokens(ctx, engine);
  const size_t max_bytes = static_cast<size_t>(max_tokens) * 16;
  size_t bytes = 0;
  int64_t ids = 0;
  for (const auto& e : prompt) {
    if (e.is_string()) {
      check_text_size(ctx, engine, e.get_ref<const std::string&>(), "prompt");
      bytes += e.get_ref<const std::string&>().size();
    } else if (e.is_array()) {
      ids += static_cast<int64_t>(e.size());
    }
  }
  if (bytes > max_bytes || ids > max_tokens) {
    throw HttpError(
        400,
        fmt::format("'prompt' holds {} in all; this server takes at most {} prompt tokens per request "
                    "(--max-request-tokens {}{})",
                    bytes > max_bytes ? fmt::format("{} bytes of text", bytes) : fmt::format("{} token ids", ids),
                    max_tokens, max_tokens, bytes > max_bytes ? ", 16 bytes of text per token" : ""),
        "prompt");
  }
}

void check_request_tokens(const ServerContext& ctx, const EngineClient& engine,
                          const std::vector<PreparedPrompt>& prompts) {
  const int64_t limit = max_request_tokens(ctx, engine);
  int64_t total = 0;
  for (const auto& p : prompts) total += static_cast<int64_t>(p.ids.size());
  if (total > limit) {
    throw HttpError(400,
                    fmt::format("'prompt' is {} tokens in all; this server takes at most {} prompt tokens per "
                                "request (--max-request-tokens)",
                                total, limit),
                    "prompt");
  }
}

void finish_params(SamplingParams& p, const ServerContext& ctx, const EngineClient& engine) {
  const ModelInfo info = engine.model_info();
  const Tokenizer* tok = engine.tokenizer();
  try {
    p.validate(static_cast<int>(ctx.cfg().model.max_log_probs),
               static_cast<int32_t>(info.vocab_size > 0 ? info.vocab_size : (tok ? tok->vocab_size() : INT32_MAX)));
  } catch (const cypris::Error& e) {
    // validate() starts its messages with the parameter's name.
    std::string msg = e.what();
    std::string first = msg.substr(0, msg.find_first_of(" :'"));
    std::optional<std::string> param;
    if (find_sampling_param(first)) param = first;
    throw HttpError(400, msg, param);
  }
  // Ids a request gave itself (dry_sequence_breaker_ids) are used as they are.
  if (tok && !p.dry_sequence_breakers.empty() && p.dry_sequence_breaker_ids.empty()) {
    p.resolve_dry_sequence_breakers([tok](const std::string& s) { return tok->encode(s, false); });
  }
}

void check_fits_context(const EngineClient& engine, size_t prompt_len, const SamplingParams& p) {
  const int64_t max_len = engine.model_info().max_model_len;
  if (max_len <= 0) return;
  const auto len = static_cast<int64_t>(prompt_len);
  const int64_t max_tokens = p.max_tokens.value_or(max_len - len);
  // --context-shift: old tokens make room for new ones, only the prompt must fit.
  if (len + max_tokens > max_len && !(engine.model_info().context_shift && len < max_len)) {
    throw HttpError(400, fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                     "tokens ({} in the prompt, {} for the completion). Please reduce the prompt or "
                                     "the completion length.",
                                     max_len, len + max_tokens, len, max_tokens));
  }
  if (max_tokens < 1) {
    throw HttpError(400, fmt::format("This model's maximum context length is {} tokens and the prompt has {}: no room "
                                     "is left for a completion.",
                                     max_len, len));
  }
}

Submitted submit_prompts(ServerContext& ctx, EngineClient& engine, const std::string& base_id,
                         const std::vector<PreparedPrompt>& prompts, std::shared_ptr<const SamplingParams> params,
                         int priority, const std::string& lora) {
  Submitted s;
  // From the moment the request's head began to arrive, so time to first token counts the
  // server's own work (parsing, tokenizing) too.
  s.arrival = current_connection().fd >= 0 ? current_connection().arrival : std::chrono::steady_clock::now();
  if (ctx.stopping()) throw HttpError(503, "the server is shutting down");
  std::vector<GenerateRequest> reqs;
  reqs.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest req;
    req.request_id = prompts.size() == 1 ? base_id : fmt::format("{}-{}", base_id, i);
    req.prompt_token_ids = prompts[i].ids;
    req.prompt = prompts[i].text;
    req.params = params;
    req.priority = priority;
    req.lora_name = lora;
    // Not logged here: the engine logs each request it accepts, once, as a --max-log-len excerpt
    // (logging here too printed every request twice, and rejected ones in full).
    reqs.push_back(std::move(req));
    s.prompt_lens.push_back(static_cast<int64_t>(prompts[i].ids.size()));
  }
  try {
    s.streams = engine.submit_all(std::move(reqs));
  } catch (const cypris::Error& e) {
    throw HttpError(ctx.stopping() ? 503 : 400, e.what());
  } catch (const std::exception& e) {
    throw HttpError(500, std::string("the engine failed to queue the request: ") + e.what());
  }
  if (s.streams.size() != prompts.size()) {
    for (auto& st : s.streams) st->cancel();
    throw HttpError(500, "the engine did not accept the request");
  }
  for (auto& st : s.streams) ctx.track(st);
  return s;
}

std::string request_lora(const nlohmann::json& body, ServerContext& ctx, const EngineClient& engine) {
  auto it = body.find("model");
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty()) return "";
  const std::string name = it->get<std::string>();
  const std::vector<std::string> served = ctx.served_names();
  if (std::find(served.begin(), served.end(), name) != served.end()) return "";
  if (!engine.lora_enabled()) return "";
  for (const LoraInfo& l : engine.loras()) {
    if (l.name == name) return name;
  }
  throw HttpError(404,
                  fmt::format("The model '{}' does not exist: it is neither the served model ('{}') nor a loaded LoRA "
                              "adapter (GET /v1/models lists them)",
                              name, served.front()),
                  "model");
}

int request_priority(const nlohmann::json& body, const ServerContext& ctx) {
  auto it = body.find("priority");
  if (it == body.end() || it->is_null()) return 0;
  if (!it->is_number_integer()) throw HttpError(400, "'priority' must be an integer (lower runs first)", "priority");
  const int64_t v = it->get<int64_t>();
  if (v < INT32_MIN || v > INT32_MAX) {
    throw HttpError(400, fmt::format("'priority' must be in [{}, {}], got {}", INT32_MIN, INT32_MAX, v), "priority");
  }
  if (v != 0 && ctx.engine_config().scheduler.scheduling_policy != "priority") {
    throw HttpError(400,
                    fmt::format("'priority' is {} but the server schedules first come first served; start it with "
                                "--scheduling-policy priority to use request priorities",
                                v),
                    "priority");
  }
  return static_cast<int>(v);
}

void untrack_all(ServerContext& ctx, const Submitted& s) {
  for (auto& st : s.streams) ctx.untrack(st);
}

DrainResult drain_outputs(ServerContext& ctx, const Submitted& sub, const std::function<bool()>& client_alive,
                          const OnOutput& on_output) {
  StreamSet set(sub.streams);
  const size_t n = sub.streams.size();
  std::vector<RequestTimer> timers(n, RequestTimer(&ctx.metrics, sub.arrival));
  std::vector<std::optional<std::string>> reason(n);  // the first choice's finish reason, per stream
  DrainResult r;
  auto give_up = [&] {
    r.client_gone = true;
    set.cancel_all();
    for (auto& t : timers) t.finish("abort");
  };
  std::chrono::steady_clock::time_point stop_seen{};
  while (!set.all_done()) {
    if (ctx.stopping() && !r.server_stopping) {
      r.server_stopping = true;
      stop_seen = std::chrono::steady_clock::now();
      set.cancel_all();
    }
    auto got = set.next(kPollInterval);
    if (!got) {
      if (r.server_stopping) {
        // Cancelled already: the connection is closing with the server, the engine's last outputs
        // may never come (it stopped answering). Answer 503 after a short grace whatever it does.
        if (std::chrono::steady_clock::now() - stop_seen > kShutdownDrainGrace) {
          for (auto& t : timers) t.finish("abort");
          break;
        }
        continue;
      }
      if (!client_alive()) {  // nobody to answer: stop generating
        give_up();
        break;
      }
      continue;
    }
    const size_t si = got->first;
    const RequestOutput& out = got->second;
    if (out.error) {
      r.error = out.error;
      r.client_error = out.client_error;
      timers[si].finish("error");
      set.cancel_all();
      break;
    }
    int64_t new_tokens = 0;
    for (const auto& d : out.outputs) {
      new_tokens += static_cast<int64_t>(d.token_ids.size());
      if (d.index == 0 && d.finish_reason) reason[si] = d.finish_reason;
    }
    timers[si].on_tokens(new_tokens);
    if (out.finished) {
      r.prompt_tokens += out.num_prompt_tokens;
      r.completion_tokens += out.num_generated_tokens;
      timers[si].finish(r.server_stopping ? "abort" : reason[si].value_or("stop"));
    }
    if (!on_output(si, out)) {
      give_up();
      break;
    }
    // Every output is one engine step: a client that left is noticed here, not after the next wait.
    if (!set.all_done() && !client_alive()) {
      give_up();
      break;
    }
  }
  // The shutdown may cancel the request between the check above and its last output: a request
  // that ended aborted while the server stops was cut off by it.
  if (!r.client_gone && !r.error && !r.server_stopping && ctx.stopping()) {
    for (const auto& why : reason) {
      if (!why || *why == "abort") r.server_stopping = true;
    }
  }
  return r;
}

static std::string shutdown_message(const DrainResult& r) {
  return fmt::format("the server is shutting down: the request was cut off after {} generated tokens",
                     r.completion_tokens);
}

// The sampling parameter an engine error names first ("banned_strings: ..."), if any.
static std::optional<std::string> param_named_by(const std::string& msg) {
  std::string first = msg.substr(0, msg.find_first_of(" :'"));
  if (find_sampling_param(first)) return first;
  return std::nullopt;
}

void throw_if_failed(const DrainResult& r) {
  if (r.error && r.client_error) throw HttpError(400, *r.error, param_named_by(*r.error));
  if (r.error) throw HttpError(500, *r.error);
  // A partial answer must not look like a complete one.
  if (r.server_stopping) throw HttpError(503, shutdown_message(r));
}

bool write_openai_stream_error(const std::function<bool(const std::string&)>& write, const DrainResult& r) {
  if (!r.error && !r.server_stopping) return false;
  const std::string err = r.error && r.client_error ? error_object(400, *r.error, param_named_by(*r.error))
                          : r.error                 ? error_object(500, *r.error)
                                                    : error_object(503, shutdown_message(r));
  write(sse_data("{\"error\":" + err + "}"));
  write(std::string(kSseDone));
  return true;
}

void cancel_and_untrack(ServerContext& ctx, const Submitted& s) {
  for (auto& st : s.streams) {
    if (!st->done()) st->cancel();
  }
  untrack_all(ctx, s);
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::string token_text(const Tokenizer* tok, int32_t id) {
  if (!tok) return fmt::format("token_id:{}", id);
  const int32_t one[1] = {id};
  return tok->decode(std::span<const int32_t>(one, 1), false);
}

json completion_logprobs(const Tokenizer* tok, const std::vector<PositionLogprobs>& lps, size_t& offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& lp : lps) {
    std::string t = token_text(tok, lp.token_id);
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (const auto& c : lp.top) top[token_text(tok, c.token_id)] = c.logprob;
    // The sampled token is always listed, as OpenAI does.
    if (!top.contains(t)) top[t] = lp.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += t.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

static json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

json chat_logprobs_content(const Tokenizer* tok, const std::vector<PositionLogprobs>& lps, int top_n) {
  json content = json::array();
  for (const auto& lp : lps) {
    std::string t = token_text(tok, lp.token_id);
    json top = json::array();
    for (size_t k = 0; k < lp.top.size() && static_cast<int>(k) < top_n; ++k) {
      std::string ct = token_text(tok, lp.top[k].token_id);
      top.push_back({{"token", ct}, {"logprob", lp.top[k].logprob}, {"bytes", bytes_of(ct)}});
    }
    content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
  }
  return content;
}

int64_t unix_time_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool get_bool(const json& body, const char* key, bool def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number_integer() && (it->get<int64_t>() == 0 || it->get<int64_t>() == 1)) return it->get<int64_t>() == 1;
  throw HttpError(400, fmt::format("'{}' must be a boolean", key), std::string(key));
}

int64_t get_int(const json& body, const char* key, int64_t def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()) {
    return static_cast<int64_t>(it->get<double>());
  }
  throw HttpError(400, fmt::format("'{}' must be an integer", key), std::string(key));
}

std::string get_string(const json& body, const char* key, const std::string& def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (it->is_string()) return it->get<std::string>();
  throw HttpError(400, fmt::format("'{}' must be a string", key), std::string(key));
}

bool stream_include_usage(const json& body) {
  auto it = body.find("stream_options");
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_object()) throw HttpError(400, "'stream_options' must be an object", "stream_options");
  return get_bool(*it, "include_usage", false);
}

}  // namespace cypris::server
