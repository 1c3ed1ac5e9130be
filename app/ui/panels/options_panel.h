// Engine options panel. It opens on the Quick view (QuickOptions: model, context length, GPU layers,
// weight and KV-cache types, and the memory that choice takes on the GPU and in RAM beside what the
// machine has); the Advanced tab holds every option of option_table(): common ones first, then the
// table's groups, options without effect in Cypris hidden unless asked for. Each option has the
// widget its type calls for, help as a tooltip, reset to default, NotYet options disabled with their
// note. Above both: the validation result of the whole config, and option profiles.
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
  void draw_quick();
  void draw_gpu_layers(const ModelFootprint* fp);
  void draw_memory();
  void draw_advanced();
  void draw_option(const OptionSpec& s);
  std::map<std::string, std::string> text_;  // text-field buffers by option key
  std::string filter_;
  std::string profile_name_;
  std::string profile_message_;
  bool profile_error_ = false;
  bool only_changed_ = false;
  bool show_no_effect_ = false;
  bool machine_read_ = false;
};

}  // namespace cypris
