// Small ImGui helpers shared by the panels: tooltips, coloured messages, std::string inputs.
#pragma once

#include <imgui.h>

#include <string>

namespace cypris::ui {

inline const ImVec4 kRed{0.95f, 0.35f, 0.35f, 1.0f};
inline const ImVec4 kYellow{0.95f, 0.8f, 0.3f, 1.0f};
inline const ImVec4 kGreen{0.4f, 0.85f, 0.45f, 1.0f};
inline const ImVec4 kGrey{0.6f, 0.6f, 0.6f, 1.0f};

// A tooltip on the last item, wrapped to a readable width.
void tooltip(const std::string& text);
// "(?)" that shows text on hover.
void help_marker(const std::string& text);
void text_colored_wrapped(const ImVec4& color, const std::string& text);
// A button that is greyed out and inert when !enabled.
bool button(const char* label, bool enabled = true, const ImVec2& size = ImVec2(0, 0));

}  // namespace cypris::ui
