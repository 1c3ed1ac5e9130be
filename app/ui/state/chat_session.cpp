// ChatSession; see chat_session.h.
#include "app/ui/state/chat_session.h"

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>

#include "engine/core/engine_client.h"
#include "engine/request/outputs.h"

namespace cypris {

ChatSession::ChatSession(AppServices& services, UiQueue& queue, BackgroundJobs& jobs, std::function<double()> now_s)
    : services_(services), queue_(queue), jobs_(jobs), now_s_(std::move(now_s)) {}

bool ChatSession::send(const std::shared_ptr<EngineClient>& engine, const std::string& text) {
  last_error_.clear();
  if (!engine) {
    last_error_ = "load a model first (Engine options → Load)";
    return false;
  }
  if (transcript_.generating()) {
    last_error_ = "a reply is still being generated; press Stop (Esc) first";
    return false;
  }
  if (!transcript_.add_user(text)) {
    last_error_ = "type a message first";
    return false;
  }
  return start_reply(engine);
}

bool ChatSession::regenerate(const std::shared_ptr<EngineClient>& engine) {
  last_error_.clear();
  if (!engine) {
    last_error_ = "load a model first (Engine options → Load)";
    return false;
  }
  if (!transcript_.prepare_regenerate()) {
    last_error_ = transcript_.generating() ? "a reply is still being generated" : "there is no message to answer";
    return false;
  }
  return start_reply(engine);
}

void ChatSession::stop() {
  if (!in_flight_) return;
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(in_flight_->mu);
    in_flight_->stop_requested = true;
    stream = in_flight_->stream;
  }
  if (stream) stream->cancel();
}

bool ChatSession::start_reply(const std::shared_ptr<EngineClient>& engine) {
  auto messages = transcript_.template_messages();
  if (!transcript_.begin_reply(now_s_())) {
    last_error_ = "there is no message to answer";
    return false;
  }
  nlohmann::json sampler = samplers_.to_request_json();
  const StructuredCheck& structured = structured_check_.validate(samplers_.structured());
  if (structured.state == StructuredCheck::State::Valid) {
    sampler.update(structured.fields);
  } else if (structured.state == StructuredCheck::State::Invalid) {
    last_error_ = "sent without structured output (the field is invalid: " + structured.message + ")";
  }
  if (!adapter_.empty()) sampler["model"] = adapter_;
  const std::string request_id = "chat-" + std::to_string(next_id_++);
  auto flight = std::make_shared<InFlight>();
  in_flight_ = flight;
  auto now = now_s_;
  jobs_.run("chat", [this, engine, messages, sampler, request_id, flight, now](const std::atomic<bool>& app_stop) {
    auto fail = [&](const std::string& msg) { queue_.post([this, msg, now] { transcript_.fail_reply(msg, now()); }); };
    std::shared_ptr<RequestStream> stream;
    try {
      auto ids = services_.apply_chat_template(*engine, messages);
      const auto n_prompt = static_cast<int64_t>(ids.size());
      queue_.post([this, n_prompt] { transcript_.set_prompt_tokens(n_prompt); });
      stream = services_.generate(*engine, request_id, std::move(ids), sampler);
      if (!stream) return fail("the engine returned no stream");
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    {
      std::lock_guard<std::mutex> lock(flight->mu);
      flight->stream = stream;
      if (flight->stop_requested) stream->cancel();
    }
    bool finished = false;
    while (!finished) {
      if (app_stop) stream->cancel();
      std::optional<RequestOutput> out = stream->next(std::chrono::milliseconds(100));
      if (!out) {
        // A stopped request whose engine sent nothing more within the wait is over for the UI.
        if (stream->done() || stream->cancelled()) break;
        continue;
      }
      std::string text;
      int64_t tokens = 0;
      std::optional<std::string> reason;
      for (const auto& d : out->outputs) {
        if (d.index != 0) continue;  // the chat shows the first of n replies
        text += d.text;
        tokens += static_cast<int64_t>(d.token_ids.size());
        if (d.finish_reason) reason = d.finish_reason;
      }
      finished = out->finished;
      const auto err = out->error;
      const auto n_prompt = out->num_prompt_tokens;
      queue_.post([this, text, tokens, finished, reason, err, n_prompt, now] {
        if (!text.empty() || tokens > 0) transcript_.append_reply(text, tokens, now());
        if (n_prompt > 0) transcript_.set_prompt_tokens(n_prompt);
        if (err) {
          transcript_.fail_reply(*err, now());
        } else if (finished) {
          transcript_.finish_reply(reason.value_or("stop"), now());
        }
      });
    }
    if (!finished) {
      // The stream ended without a finished output (cancelled before the engine answered).
      queue_.post([this, now] { transcript_.finish_reply("abort", now()); });
    }
  });
  return true;
}

}  // namespace cypris
