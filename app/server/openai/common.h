// Pieces shared by the OpenAI and Kobold generation routes: turning prompts into token ids,
// validating and submitting requests, and formatting logprobs. Internal to app/server/.
#pragma once

#include <memory>
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

// Checks the parameters (HttpError 400 naming the parameter) and fills what needs the tokenizer.
void finish_params(SamplingParams& p, const ServerContext& ctx, const EngineClient& engine);

struct Submitted {
  std::vector<std::shared_ptr<RequestStream>> streams;  // one per prompt
  std::vector<int64_t> prompt_lens;
};

// Submits one engine request per prompt (ids "<base_id>-<i>"); engine rejections (context length,
// invalid values) become HttpError 400 after cancelling what was already submitted. Every stream
// is tracked by ctx until untrack_all().
Submitted submit_prompts(ServerContext& ctx, EngineClient& engine, const std::string& base_id,
                         const std::vector<PreparedPrompt>& prompts, std::shared_ptr<const SamplingParams> params);
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

// How long a handler waits for the next output before checking the connection again.
inline constexpr std::chrono::milliseconds kPollInterval{20};

// The next output of s, waiting in kPollInterval slices. The request is cancelled when the server
// is stopping (its final "abort" output still comes) and when client_alive() says the client has
// gone; then std::nullopt comes back at once, as it does when the stream is finished.
std::optional<RequestOutput> next_output(RequestStream& s, const ServerContext& ctx,
                                         const std::function<bool()>& client_alive);
// The same over the streams of a multi-prompt request: the next output of any of them, with the
// index of its stream.
std::optional<std::pair<size_t, RequestOutput>> next_output(StreamSet& set, const ServerContext& ctx,
                                                            const std::function<bool()>& client_alive);

}  // namespace cypris::server
