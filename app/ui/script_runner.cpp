// ScriptRunner; see script_runner.h.
#include "app/ui/script_runner.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/ui/panels/chat_panel.h"
#include "app/ui/panels/server_panel.h"
#include "engine/common/log.h"

namespace cypris {

ScriptRunner::ScriptRunner(AppContext& ctx, std::vector<ScriptAction> actions, std::vector<Panel*> panels,
                           ChatPanel& chat, ServerPanel& server)
    : ctx_(ctx), actions_(std::move(actions)), panels_(std::move(panels)), chat_(chat), server_(server) {}

std::optional<std::string> ScriptRunner::take_screenshot_request() {
  auto s = std::move(screenshot_);
  screenshot_.reset();
  return s;
}

std::optional<int> ScriptRunner::fail(const ScriptAction& a, const std::string& msg, int code) {
  std::fprintf(stderr, "cypris: --ui-script line %d: %s\n", a.line, msg.c_str());
  return code;
}

std::optional<int> ScriptRunner::step(double now_s) {
  using K = ScriptAction::Kind;
  while (pc_ < actions_.size()) {
    const ScriptAction& a = actions_[pc_];
    switch (a.kind) {
      case K::Open:
      case K::Close:
        if (a.arg == "chat") break;  // the chat is always shown
        for (Panel* p : panels_) {
          if (a.arg == p->script_name()) p->request_open(a.kind == K::Open);
        }
        break;
      case K::Set:
        if (!find_option(a.arg)) return fail(a, "unknown option '" + a.arg + "'", 2);
        if (!ctx_.options->set_text(a.arg, a.value)) {
          return fail(a, ctx_.options->field_error(find_option(a.arg)->key()).value_or("invalid value"), 2);
        }
        break;
      case K::OptionsView:
        ctx_.options_view_request = a.arg;
        break;
      case K::Sampler:
        try {
          nlohmann::json v = nlohmann::json::parse(a.value, nullptr, false);
          if (v.is_discarded()) v = a.value;  // a bare word: a string
          ctx_.chat->samplers().set(a.arg, v, "--ui-script");
        } catch (const std::exception& e) {
          return fail(a, e.what(), 2);
        }
        break;
      case K::Structured:
        ctx_.chat->samplers().structured() = {*parse_structured_mode(a.arg), a.value};
        break;
      case K::Load:
        ctx_.load_model();
        break;
      case K::Unload:
        ctx_.engine->unload();
        break;
      case K::WaitLoaded:
        if (wait_started_ < 0) wait_started_ = now_s;
        if (ctx_.engine->status() == EngineSession::Status::Loading) {
          if (now_s - wait_started_ > a.number) return fail(a, "the model did not load in time", 4);
          return std::nullopt;
        }
        wait_started_ = -1;
        if (ctx_.engine->status() != EngineSession::Status::Loaded) {
          std::string err = ctx_.engine->error().empty() ? ctx_.options->validate().error : ctx_.engine->error();
          return fail(a, "load failed: " + err, 3);
        }
        break;
      case K::Type:
        chat_.set_input(a.arg);
        break;
      case K::WaitInput:
      case K::WaitChatError: {
        if (wait_started_ < 0) wait_started_ = now_s;
        const bool ok =
            a.kind == K::WaitInput ? chat_.input() == a.arg : ctx_.chat->last_error().find(a.arg) != std::string::npos;
        if (!ok) {
          if (now_s - wait_started_ > a.number) {
            return fail(a,
                        a.kind == K::WaitInput ? "the chat input is '" + chat_.input() + "'"
                                               : "the chat error is '" + ctx_.chat->last_error() + "'",
                        4);
          }
          return std::nullopt;
        }
        wait_started_ = -1;
        break;
      }
      case K::Send:
        chat_.send();
        if (!ctx_.chat->last_error().empty()) return fail(a, ctx_.chat->last_error(), 5);
        break;
      case K::Stop:
        chat_.stop();
        break;
      case K::Regenerate:
        chat_.regenerate();
        break;
      case K::WaitReply:
        if (wait_started_ < 0) wait_started_ = now_s;
        if (ctx_.chat->transcript().generating()) {
          if (now_s - wait_started_ > a.number) return fail(a, "no reply in time", 4);
          return std::nullopt;
        }
        wait_started_ = -1;
        break;
      case K::ExpectReply: {
        const auto& msgs = ctx_.chat->transcript().messages();
        if (msgs.empty() || msgs.back().role != ChatRole::Assistant) return fail(a, "no reply", 5);
        const auto& m = msgs.back();
        if (m.state == ChatMessage::State::Failed) return fail(a, "the reply failed: " + m.error, 5);
        if (m.content.empty()) return fail(a, "the reply is empty", 5);
        std::printf("reply: %s\n", m.content.c_str());
        break;
      }
      case K::Server:
        if (a.arg == "on") {
          server_.start();
        } else {
          server_.stop();
        }
        break;
      case K::HubSearch:
        if (wait_started_ < 0) {
          wait_started_ = now_s;
          ctx_.hub->search(a.arg);
        }
        if (ctx_.hub->searching()) return std::nullopt;
        wait_started_ = -1;
        break;
      case K::HubRepo:
        if (wait_started_ < 0) {
          wait_started_ = now_s;
          ctx_.hub->select_repo(a.arg);
        }
        if (ctx_.hub->listing()) return std::nullopt;
        wait_started_ = -1;
        break;
      case K::Download:
        ctx_.hub->download();
        break;
      case K::WaitDownload:
        if (wait_started_ < 0) wait_started_ = now_s;
        if (ctx_.hub->downloading()) {
          if (now_s - wait_started_ > a.number) return fail(a, "the download did not finish in time", 4);
          return std::nullopt;
        }
        wait_started_ = -1;
        if (!ctx_.hub->download_error().empty()) return fail(a, "download failed: " + ctx_.hub->download_error(), 6);
        break;
      case K::Frames:
        if (frames_left_ < 0) frames_left_ = static_cast<int>(a.number);
        if (frames_left_-- > 0) return std::nullopt;
        frames_left_ = -1;
        break;
      case K::Screenshot:
        // Two frames first so ImGui settles auto-sized layout, then save this frame.
        if (frames_left_ < 0) frames_left_ = 2;
        if (frames_left_-- > 0) return std::nullopt;
        frames_left_ = -1;
        screenshot_ = a.arg;
        ++pc_;
        return std::nullopt;
      case K::Quit:
        ++pc_;
        return static_cast<int>(a.number);
    }
    ++pc_;
  }
  return 0;  // the end of the script quits
}

}  // namespace cypris
