// Samplers panel: per-request sampler controls generated from sampler_table() (the whole
// Aphrodite sampler set), grouped, with help tooltips, reset, and presets (shipped ones from
// resources/sampler_presets, the user's own in the config folder).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "app/ui/app_context.h"
#include "app/ui/state/sampler_table.h"

namespace cypris {

class SamplersPanel : public Panel {
 public:
  explicit SamplersPanel(AppContext& ctx) : Panel(ctx) {}
  const char* title() const override { return "Samplers"; }
  const char* script_name() const override { return "samplers"; }
  void draw() override;
  // Applies the preset named in the settings (at startup).
  void apply_saved_preset();

 private:
  void reload_presets();
  void draw_param(const SamplerSpec& s);
  void draw_structured_output();
  std::vector<SamplerPreset> presets_;
  std::vector<std::string> preset_errors_;
  bool loaded_ = false;
  std::map<std::string, std::string> text_;
  std::string save_name_;
  std::string message_;
  bool message_error_ = false;
};

}  // namespace cypris
