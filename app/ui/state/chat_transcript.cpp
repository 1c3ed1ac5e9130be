// ChatTranscript; see chat_transcript.h.
#include "app/ui/state/chat_transcript.h"

namespace cypris {

double ChatMessage::tokens_per_s() const {
  double end = finished_s >= 0 ? finished_s : -1.0;
  if (generated_tokens <= 0 || end < 0) return 0.0;
  double dt = end - started_s;
  return dt > 0 ? static_cast<double>(generated_tokens) / dt : 0.0;
}

double ChatMessage::time_to_first_token() const {
  return first_token_s < 0 ? -1.0 : first_token_s - started_s;
}

bool ChatTranscript::add_user(const std::string& text) {
  if (generating() || text.find_first_not_of(" \t\r\n") == std::string::npos) return false;
  ChatMessage m;
  m.role = ChatRole::User;
  m.content = text;
  messages_.push_back(std::move(m));
  return true;
}

std::optional<size_t> ChatTranscript::begin_reply(double now_s) {
  if (generating() || messages_.empty() || messages_.back().role != ChatRole::User) return std::nullopt;
  ChatMessage m;
  m.role = ChatRole::Assistant;
  m.state = ChatMessage::State::Streaming;
  m.started_s = now_s;
  messages_.push_back(std::move(m));
  streaming_index_ = messages_.size() - 1;
  return streaming_index_;
}

void ChatTranscript::append_reply(const std::string& text, int64_t new_tokens, double now_s) {
  if (!streaming_index_) return;
  auto& m = messages_[*streaming_index_];
  m.content += text;
  m.generated_tokens += new_tokens;
  if (m.first_token_s < 0 && new_tokens > 0) m.first_token_s = now_s;
  // Keep a running rate while streaming.
  m.finished_s = now_s;
}

void ChatTranscript::set_prompt_tokens(int64_t n) {
  if (streaming_index_) messages_[*streaming_index_].prompt_tokens = n;
}

void ChatTranscript::finish_reply(const std::string& finish_reason, double now_s) {
  if (!streaming_index_) return;
  auto& m = messages_[*streaming_index_];
  m.finish_reason = finish_reason;
  m.state = finish_reason == "abort" ? ChatMessage::State::Stopped : ChatMessage::State::Done;
  m.finished_s = now_s;
  streaming_index_.reset();
}

void ChatTranscript::fail_reply(const std::string& error, double now_s) {
  if (!streaming_index_) return;
  auto& m = messages_[*streaming_index_];
  m.state = ChatMessage::State::Failed;
  m.error = error;
  m.finished_s = now_s;
  streaming_index_.reset();
}

bool ChatTranscript::edit(size_t i, const std::string& text) {
  if (generating() || i >= messages_.size()) return false;
  messages_[i].content = text;
  if (messages_[i].state == ChatMessage::State::Failed) {
    messages_[i].state = ChatMessage::State::Done;
    messages_[i].error.clear();
  }
  return true;
}

bool ChatTranscript::remove(size_t i) {
  if (generating() || i >= messages_.size()) return false;
  messages_.erase(messages_.begin() + static_cast<std::ptrdiff_t>(i));
  return true;
}

bool ChatTranscript::prepare_regenerate() {
  if (generating()) return false;
  size_t last_user = messages_.size();
  for (size_t i = messages_.size(); i-- > 0;) {
    if (messages_[i].role == ChatRole::User) {
      last_user = i;
      break;
    }
  }
  if (last_user == messages_.size()) return false;
  messages_.resize(last_user + 1);
  return true;
}

void ChatTranscript::clear() {
  if (generating()) return;
  messages_.clear();
}

std::vector<ChatTemplateMessage> ChatTranscript::template_messages() const {
  std::vector<ChatTemplateMessage> out;
  if (system_prompt.find_first_not_of(" \t\r\n") != std::string::npos) out.push_back({"system", system_prompt});
  for (size_t i = 0; i < messages_.size(); ++i) {
    const auto& m = messages_[i];
    if (streaming_index_ && *streaming_index_ == i) continue;
    if (m.state == ChatMessage::State::Failed) continue;
    out.push_back({m.role == ChatRole::User ? "user" : "assistant", m.content});
  }
  return out;
}

}  // namespace cypris
