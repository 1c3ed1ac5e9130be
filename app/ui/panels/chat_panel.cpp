// The Chat panel; see chat_panel.h.
#include "app/ui/panels/chat_panel.h"

#include <fmt/format.h>
#include <imgui.h>
#include <imgui_internal.h>
#include <imgui_stdlib.h>

#include "app/ui/widgets.h"

namespace cypris {

void ChatPanel::send() {
  ChatSession& chat = *ctx_.chat;
  if (chat.send(ctx_.engine->engine(), input_)) {
    input_.clear();
    input_replaced_ = true;  // the box may still hold the sent text
  }
  focus_input_ = true;
}

void ChatPanel::stop() {
  ctx_.chat->stop();
}

void ChatPanel::regenerate() {
  ctx_.chat->regenerate(ctx_.engine->engine());
}

void ChatPanel::handle_shortcuts(bool escape_pressed) {
  const bool esc = escape_pressed || ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape), false);
  if (esc && ctx_.chat->transcript().generating()) stop();
}

void ChatPanel::draw() {
  ChatSession& chat = *ctx_.chat;
  ChatTranscript& t = chat.transcript();
  ImGui::TextUnformatted("Chat");
  ImGui::SameLine();
  if (!ctx_.engine->loaded()) {
    ImGui::TextDisabled("(no model loaded)");
  } else {
    ImGui::TextDisabled("with %s", ctx_.engine->model_info().model.c_str());
    draw_adapter_choice();
  }
  ImGui::SameLine(ImGui::GetContentRegionAvail().x + ImGui::GetCursorPosX() - ImGui::GetFontSize() * 4.5f);
  if (ui::button("Clear chat", !t.generating() && !t.messages().empty())) t.clear();

  if (ImGui::TreeNode("System prompt")) {
    if (ImGui::InputTextMultiline("##system", &t.system_prompt, ImVec2(-1, ImGui::GetTextLineHeight() * 4))) {
      ctx_.settings->system_prompt = t.system_prompt;
    }
    if (ImGui::IsItemDeactivatedAfterEdit()) ctx_.save_settings();
    ImGui::TreePop();
  }
  draw_messages();
  draw_input();
}

void ChatPanel::draw_messages() {
  ChatTranscript& t = ctx_.chat->transcript();
  const float input_h = ImGui::GetTextLineHeight() * 4 + ImGui::GetFrameHeightWithSpacing() * 2.5f;
  ImGui::BeginChild("messages", ImVec2(0, -input_h), true);
  const bool at_bottom = ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - 4.0f;
  if (t.messages().empty()) {
    ImGui::TextDisabled(ctx_.engine->loaded() ? "Say something below." : "Load a model (top bar), then chat here.");
  }
  std::optional<size_t> remove;
  size_t total_len = 0;
  for (size_t i = 0; i < t.messages().size(); ++i) {
    const ChatMessage& m = t.messages()[i];
    total_len += m.content.size();
    ImGui::PushID(static_cast<int>(i));
    const bool user = m.role == ChatRole::User;
    ImGui::TextColored(user ? ImVec4(0.55f, 0.75f, 1.0f, 1.0f) : ImVec4(0.75f, 0.95f, 0.6f, 1.0f), "%s",
                       user ? "You" : "Assistant");
    if (!t.generating()) {
      ImGui::SameLine();
      if (ImGui::SmallButton("Edit")) {
        editing_ = i;
        edit_buffer_ = m.content;
      }
      ImGui::SameLine();
      if (ImGui::SmallButton("Delete")) remove = i;
      if (!user && i + 1 == t.messages().size()) {
        ImGui::SameLine();
        if (ImGui::SmallButton("Regenerate")) regenerate();
      }
    }
    if (editing_ && *editing_ == i) {
      ImGui::InputTextMultiline("##edit", &edit_buffer_, ImVec2(-1, ImGui::GetTextLineHeight() * 5));
      if (ImGui::Button("Save")) {
        t.edit(i, edit_buffer_);
        editing_.reset();
      }
      ImGui::SameLine();
      if (ImGui::Button("Cancel")) editing_.reset();
    } else {
      ImGui::PushTextWrapPos(0.0f);
      std::string text = m.content;
      if (m.state == ChatMessage::State::Streaming) text += " ...";
      ImGui::TextUnformatted(text.c_str());
      ImGui::PopTextWrapPos();
    }
    if (!user) {
      if (m.state == ChatMessage::State::Failed) {
        ui::text_colored_wrapped(ui::kRed, "Failed: " + m.error);
      } else if (m.generated_tokens > 0 || m.state != ChatMessage::State::Streaming) {
        std::string line = fmt::format("{} tokens, {:.1f} tokens/s, prompt {} tokens", m.generated_tokens,
                                       m.tokens_per_s(), m.prompt_tokens);
        if (m.time_to_first_token() >= 0) line += fmt::format(", first token after {:.2f} s", m.time_to_first_token());
        if (m.state == ChatMessage::State::Stopped) line += ", stopped";
        if (m.finish_reason == "length") line += ", hit max tokens";
        ImGui::TextDisabled("%s", line.c_str());
      }
    }
    ImGui::Separator();
    ImGui::PopID();
  }
  if (remove) {
    t.remove(*remove);
    editing_.reset();
  }
  if (total_len != last_len_ && at_bottom) ImGui::SetScrollHereY(1.0f);
  last_len_ = total_len;
  ImGui::EndChild();
}

void ChatPanel::draw_input() {
  ChatSession& chat = *ctx_.chat;
  const bool generating = chat.transcript().generating();
  ImGuiIO& io = ImGui::GetIO();
  // Enter sends; Shift+Enter must add a new line. ImGui's multi-line input adds a new line on
  // Ctrl+Enter when CtrlEnterForNewLine is set, so Shift+Enter is presented to it as Ctrl+Enter.
  const bool enter = ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Enter)) ||
                     ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_KeyPadEnter));
  const bool saved_ctrl = io.KeyCtrl;
  const ImGuiKeyModFlags saved_mods = io.KeyMods;  // ImGui checks the two agree
  if (enter && io.KeyShift) {
    io.KeyCtrl = true;
    io.KeyMods |= ImGuiKeyModFlags_Ctrl;
  }
  if (input_replaced_) {
    // An active text box shows its own copy of the text; drop the focus so it re-reads input_.
    ImGui::ClearActiveID();
    input_replaced_ = false;
    focus_input_ = true;
  } else if (focus_input_) {
    ImGui::SetKeyboardFocusHere();
    focus_input_ = false;
  }
  const float buttons_w = ImGui::GetFontSize() * 6;
  bool submitted = ImGui::InputTextMultiline(
      "##input", &input_, ImVec2(ImGui::GetContentRegionAvail().x - buttons_w, ImGui::GetTextLineHeight() * 4),
      ImGuiInputTextFlags_CtrlEnterForNewLine | ImGuiInputTextFlags_EnterReturnsTrue);
  io.KeyCtrl = saved_ctrl;
  io.KeyMods = saved_mods;
  ImGui::SameLine();
  ImGui::BeginGroup();
  if (generating) {
    if (ImGui::Button("Stop", ImVec2(buttons_w - ImGui::GetStyle().ItemSpacing.x, 0))) stop();
    ui::tooltip("Esc");
  } else {
    if (ui::button("Send", ctx_.engine->loaded(), ImVec2(buttons_w - ImGui::GetStyle().ItemSpacing.x, 0))) {
      submitted = true;
    }
    ui::tooltip("Enter");
  }
  ImGui::EndGroup();
  if (submitted && !generating) send();
  ImGui::TextDisabled("Enter sends, Shift+Enter adds a new line, Esc stops the reply.");
  if (!chat.last_error().empty()) {
    ImGui::SameLine();
    ImGui::TextColored(ui::kYellow, "%s", chat.last_error().c_str());
  }
}

void ChatPanel::draw_adapter_choice() {
  // Only with --enable-lora; the choice is kept (and saved) even while its adapter is not loaded.
  LoraSession& lora = *ctx_.lora;
  lora.refresh(ctx_.engine->engine());
  if (!lora.enabled()) return;
  ChatSession& chat = *ctx_.chat;
  const std::string current = chat.adapter().empty() ? "base model" : chat.adapter();
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 9);
  if (ImGui::BeginCombo("##adapter", current.c_str())) {
    auto choose = [&](const std::string& name) {
      chat.set_adapter(name);
      ctx_.settings->chat_lora = name;
      ctx_.save_settings();
    };
    if (ImGui::Selectable("base model", chat.adapter().empty())) choose("");
    for (const auto& a : lora.adapters()) {
      if (ImGui::Selectable(a.name.c_str(), chat.adapter() == a.name)) choose(a.name);
    }
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("The LoRA adapter this chat's replies use (Models → Adapters).");
}

}  // namespace cypris
