// The OpenAI-side handlers, registered by register_openai_routes() (misc_routes.cpp). Internal.
#pragma once

#include <httplib.h>

#include "app/server/context.h"

namespace cypris::server {

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace cypris::server
