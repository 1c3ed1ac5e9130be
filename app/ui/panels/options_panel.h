// Engine options panel: every option of option_table(), grouped as in the table, each with the
// widget its type calls for, help as a tooltip, reset to default, NotYet options disabled with
// their note, the validation result of the whole config, and option profiles.
#pragma once

#include <map>
#include <string>

#include "app/ui/app_context.h"

namespace cypris {

class OptionsPanel : public Panel {
 public:
  explicit OptionsPanel(AppContext& ctx) : Panel(ctx) {}
  const char* title() const override { return "Engine options"; }
  const char* script_name() const override { return "options"; }
  void draw() override;

 private:
  void draw_profiles();
  void draw_option(const OptionSpec& s);
  std::map<std::string, std::string> text_;  // text-field buffers by option key
  std::string filter_;
  std::string profile_name_;
  std::string profile_message_;
  bool profile_error_ = false;
  bool only_changed_ = false;
};

}  // namespace cypris
