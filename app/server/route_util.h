// The server's shared route code, used by the OpenAI and Kobold routes alike: turning prompts into
// token ids, validating and submitting requests, draining their outputs (drain_outputs), formatting logprobs and
// reading typed body fields. Internal to app/server/.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/server/context.h"
#include "engine/request/sampling_params.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris::server {

struct PreparedPrompt {
  std::string text;  // for echo and logging (decoded when the prompt came as ids)
  std::vector<int32_t> ids;
};

// The OpenAI `prompt` field: a string, a list of strings, a list of ids or a list of lists of ids.
std::vector<PreparedPrompt> prompts_from_json(const nlohmann::json& prompt, const Tokenizer* tok, bool add_special);

// Text -> ids; HttpError 400 when the model was loaded without a tokenizer.
std::vector<int32_t> encode_text(const Tokenizer* tok, const std::string& text, bool add_special);

// The most tokens one text may become in a request (--max-tokenize-tokens; by default 4 x the
// model's context), and the most bytes of text the server tokenizes for one request (16 per
// token, far more than any tokenizer packs): longer texts are refused before tokenizing, which
// bounds each request's memory to a small multiple of its body.
int64_t max_text_tokens(const ServerContext& ctx, const EngineClient& engine);
size_t max_text_bytes(const ServerContext& ctx, const EngineClient& engine);
// HttpError 400 naming field and the limit when text is longer than max_text_bytes().
void check_text_size(const ServerContext& ctx, const EngineClient& engine, const std::string& text, const char* field);

// A request's list of prompts (issue #26): at most --max-prompts-per-request of them, and at most
// --max-request-tokens prompt tokens in all (16 bytes of text per token before tokenizing).
int64_t max_request_tokens(const ServerContext& ctx, const EngineClient& engine);
// Before tokenizing: HttpError 400 naming 'prompt' and the limit for too many prompts or too
// many bytes of text in all.
void check_prompt_list(const ServerContext& ctx, const EngineClient& engine, const nlohmann::json& prompt);
// After: HttpError 400 naming 'prompt' and the limit when the prompts hold too many tokens.
void check_request_tokens(const ServerContext& ctx, const EngineClient& engine,
                          const std::vector<PreparedPrompt>& prompts);

// Checks the parameters (HttpError 400 naming the parameter) and fills what needs the tokenizer.
void finish_params(SamplingParams& p, const ServerContext& ctx, const EngineClient& engine);

// The engine's context-length check (prompt + max_tokens within max_model_len), made by the route
// before costly work such as compiling a grammar, so a request the engine would refuse anyway is
// refused first (400, the engine's message).
void check_fits_context(const EngineClient& engine, size_t prompt_len, const SamplingParams& p);

struct Submitted {
  std::vector<std::shared_ptr<RequestStream>> streams;  // one per prompt
  std::vector<int64_t> prompt_lens;
  std::chrono::steady_clock::time_point arrival;  // when the request arrived (time to first token)
};

// Submits one engine request per prompt (ids "<base_id>-<i>"), all in one hand-over
// (EngineClient::submit_all); engine rejections (context length, invalid values) become HttpError
// 400 and nothing stays queued; a server that is stopping answers 503. Every stream is tracked by
// ctx until untrack_all().
Submitted submit_prompts(ServerContext& ctx, EngineClient& engine, const std::string& base_id,
                         const std::vector<PreparedPrompt>& prompts, std::shared_ptr<const SamplingParams> params,
                         int priority = 0, const std::string& lora = "");

// The LoRA adapter a request's `model` names: "" for the base model (no `model`, or one of the
// served names; any name when LoRA is off, as before adapters existed), the adapter's name when one
// is loaded under it, else HttpError 404 naming it.
std::string request_lora(const nlohmann::json& body, ServerContext& ctx, const EngineClient& engine);

// vLLM's request `priority` (an integer; lower runs first, ties by arrival) for
// --scheduling-policy priority. Under fcfs a non-zero priority is HttpError 400, as in vLLM.
int request_priority(const nlohmann::json& body, const ServerContext& ctx);
void untrack_all(ServerContext& ctx, const Submitted& s);
// When a streaming response ends (done or the client went away): cancels what is still running
// and stops tracking the streams.
void cancel_and_untrack(ServerContext& ctx, const Submitted& s);

// {"prompt_tokens", "completion_tokens", "total_tokens"}
nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// The text of one token as it would appear in the output.
std::string token_text(const Tokenizer* tok, int32_t id);

// OpenAI legacy completion logprobs for some positions: {tokens, token_logprobs, top_logprobs,
// text_offset}; offset is advanced by each token's text length.
nlohmann::json completion_logprobs(const Tokenizer* tok, const std::vector<PositionLogprobs>& lps, size_t& offset);
// Chat logprobs content entries: [{token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}].
nlohmann::json chat_logprobs_content(const Tokenizer* tok, const std::vector<PositionLogprobs>& lps, int top_n);

int64_t unix_time_now();

// Typed reads of optional body fields: a missing or null field is the default, a wrong type is
// HttpError 400 naming the field.
bool get_bool(const nlohmann::json& body, const char* key, bool def);
int64_t get_int(const nlohmann::json& body, const char* key, int64_t def);
std::string get_string(const nlohmann::json& body, const char* key, const std::string& def);
// stream_options.include_usage
bool stream_include_usage(const nlohmann::json& body);

// How long the drain waits for the next output before looking at the connection and the server.
inline constexpr std::chrono::milliseconds kPollInterval{20};

// How a request's streams ended, as drain_outputs() saw it.
struct DrainResult {
  std::optional<std::string> error;  // the engine's error, when one came
  int64_t prompt_tokens = 0, completion_tokens = 0;
  bool client_gone = false;  // the client went away (or on_output said stop): everything was cancelled
  bool server_stopping = false;  // the server is shutting down: the request was cut off
  bool client_error = false;     // with error: the request's parameters caused it (answered 400)
};

// How long a drain waits, once the server is stopping, for the engine's last outputs of the
// cancelled request before it answers 503 anyway (an engine that no longer answers must not hold
// the shutdown; the connections give writes 1 s after the stop).
inline constexpr std::chrono::milliseconds kShutdownDrainGrace{500};

// Called with (stream index, output) for every output of a request; false stops the request (the
// client is gone, e.g. a write failed).
using OnOutput = std::function<bool(size_t, const RequestOutput&)>;

// The one loop that drains a submitted request's streams into the caller's choices: every output
// goes to on_output, the request's metrics (time to first token, inter-token time, latency,
// finish reason) are recorded, and the request is cancelled as soon as the client is gone
// (client_alive() is asked after every output, so within one engine step, and while waiting) or
// the server is stopping (its final "abort" outputs still come). An engine error cancels the rest
// and ends the drain. Returns when every stream is finished or the request was given up.
DrainResult drain_outputs(ServerContext& ctx, const Submitted& sub, const std::function<bool()>& client_alive,
                          const OnOutput& on_output);

// Non-streaming routes: HttpError 500 with the engine's error when the drain ended with one (400
// when the request's own parameters caused it), 503 when the shutdown cut it off.
void throw_if_failed(const DrainResult& r);
// OpenAI streaming routes: when the drain ended with an error, writes it as an error event and
// data: [DONE] and returns true.
bool write_openai_stream_error(const std::function<bool(const std::string&)>& write, const DrainResult& r);

}  // namespace cypris::server
