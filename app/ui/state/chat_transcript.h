// The Chat panel's model: the conversation (system prompt + user/assistant messages), one reply
// streaming at a time, edit/delete/regenerate, and per-reply token counts and tokens/s. Times are
// passed in (seconds on a monotonic clock) so it is testable without a clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/ui/state/services.h"

namespace cypris {

enum class ChatRole { User, Assistant };

struct ChatMessage {
  enum class State { Done, Streaming, Stopped, Failed };
  ChatRole role = ChatRole::User;
  std::string content;
  State state = State::Done;
  std::string finish_reason;  // "stop", "length", "abort" (assistant)
  std::string error;          // State::Failed
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double started_s = 0.0;
  double first_token_s = -1.0;
  double finished_s = -1.0;
  // Generated tokens per second from the request to the last token (0 until a token arrived).
  double tokens_per_s() const;
  // Seconds from sending to the first token (-1 if none yet).
  double time_to_first_token() const;
};

class ChatTranscript {
 public:
  std::string system_prompt;

  const std::vector<ChatMessage>& messages() const { return messages_; }
  bool generating() const { return streaming_index_.has_value(); }
  std::optional<size_t> streaming_index() const { return streaming_index_; }

  // Appends a user message. Returns false (and does nothing) for an empty text or while a reply
  // is streaming.
  bool add_user(const std::string& text);
  // Starts an assistant reply to the conversation so far (the last message must be a user one);
  // returns its index or nullopt when there is nothing to answer or a reply is already streaming.
  std::optional<size_t> begin_reply(double now_s);
  // Streaming updates for the reply being generated.
  void append_reply(const std::string& text, int64_t new_tokens, double now_s);
  void set_prompt_tokens(int64_t n);
  void finish_reply(const std::string& finish_reason, double now_s);  // "abort" marks it Stopped
  void fail_reply(const std::string& error, double now_s);

  // Edits message i's text (not while a reply streams). Returns false if not allowed.
  bool edit(size_t i, const std::string& text);
  // Deletes message i (not while a reply streams).
  bool remove(size_t i);
  // Drops the last assistant reply (and anything after the last user message) so the next
  // begin_reply() answers the same question again. False when there is no user message.
  bool prepare_regenerate();
  void clear();

  // What the chat template gets: the system prompt (if any), then every message except failed
  // replies and the reply being generated.
  std::vector<ChatTemplateMessage> template_messages() const;

 private:
  std::vector<ChatMessage> messages_;
  std::optional<size_t> streaming_index_;
};

}  // namespace cypris
