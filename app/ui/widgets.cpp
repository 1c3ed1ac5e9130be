// Shared ImGui helpers and the Panel header; see widgets.h and app_context.h.
#include "app/ui/widgets.h"

#include "app/ui/app_context.h"

namespace cypris {

bool Panel::header(bool default_open) {
  if (pending_open_ >= 0) {
    ImGui::SetNextItemOpen(pending_open_ == 1, ImGuiCond_Always);
    pending_open_ = -1;
  }
  return ImGui::CollapsingHeader(title(), default_open ? ImGuiTreeNodeFlags_DefaultOpen : 0);
}

namespace ui {

void tooltip(const std::string& text) {
  if (text.empty() || !ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) return;
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(ImGui::GetFontSize() * 32.0f);
  ImGui::TextUnformatted(text.c_str());
  ImGui::PopTextWrapPos();
  ImGui::EndTooltip();
}

void help_marker(const std::string& text) {
  ImGui::SameLine();
  ImGui::TextDisabled("(?)");
  tooltip(text);
}

void text_colored_wrapped(const ImVec4& color, const std::string& text) {
  ImGui::PushStyleColor(ImGuiCol_Text, color);
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextUnformatted(text.c_str());
  ImGui::PopTextWrapPos();
  ImGui::PopStyleColor();
}

bool button(const char* label, bool enabled, const ImVec2& size) {
  ImGui::BeginDisabled(!enabled);
  bool clicked = ImGui::Button(label, size);
  ImGui::EndDisabled();
  return clicked && enabled;
}

}  // namespace ui
}  // namespace cypris
