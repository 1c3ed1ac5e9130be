// The OpenAI-side handlers, registered by register_openai_routes() (misc_routes.cpp). Internal.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "app/server/context.h"

namespace cypris::server {

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
// Renders the prompt of a chat request (chat.cpp; also /v1/tokenize). raw is the body text: the
// messages and tools are read again in the client's key order. used_source: the template rendered.
std::string chat_prompt_of(const nlohmann::json& body, const std::string& raw, const Tokenizer* tok,
                           const ServerContext& ctx, bool default_gen_prompt, std::string* used_source = nullptr);
void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace cypris::server
