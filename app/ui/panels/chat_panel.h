// Chat panel: the streaming conversation with stop, regenerate, edit and delete, the system
// prompt, and token counts and tokens/s per reply. Enter sends, Shift+Enter adds a new line, Esc
// stops the reply.
#pragma once

#include <optional>
#include <string>

#include "app/ui/app_context.h"

namespace cypris {

class ChatPanel {
 public:
  explicit ChatPanel(AppContext& ctx) : ctx_(ctx) {}
  void draw();  // fills the region it is given (the right side of the window)

  // For --ui-script and the shortcuts.
  const std::string& input() const { return input_; }
  void set_input(const std::string& text) {
    input_ = text;
    input_replaced_ = true;
  }
  void send();
  void stop();
  void regenerate();
  // escape_pressed: an Esc press seen by the window's key callback this frame (a press and release
  // within one frame never reach ImGui 1.86's key state).
  void handle_shortcuts(bool escape_pressed);

 private:
  void draw_messages();
  void draw_input();
  void draw_adapter_choice();
  AppContext& ctx_;
  std::string input_;
  std::optional<size_t> editing_;
  std::string edit_buffer_;
  bool focus_input_ = true;
  bool input_replaced_ = false;  // input_ changed from outside while the text box may be active
  size_t last_len_ = 0;          // to follow the reply as it streams
};

}  // namespace cypris
