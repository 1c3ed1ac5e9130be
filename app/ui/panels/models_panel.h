// Models panel: a short catalogue of popular models (one click picks the repo, as a search result
// does), search the Hugging Face hub, pick a repo and a revision (branch, tag or commit),
// choose files (with sizes), download them with per-file and total progress, rate, ETA and
// cancel; the models already in the cache and local folders, to use or delete. At the top: the
// selected (and the loaded) model with how its weights are stored ("GPTQ 4-bit g128", "GGUF Q4_K_M").
// At the bottom: the loaded model's LoRA adapters (load from a folder, unload).
#pragma once

#include <map>
#include <string>

#include "app/ui/app_context.h"

namespace cypris {

class ModelsPanel : public Panel {
 public:
  explicit ModelsPanel(AppContext& ctx) : Panel(ctx) {}
  const char* title() const override { return "Models"; }
  const char* script_name() const override { return "models"; }
  void draw() override;

 private:
  void draw_selected();
  void draw_search();
  void draw_catalogue();
  void draw_repo();
  void draw_download();
  void draw_cache();
  void draw_local();
  void draw_adapters();
  std::string query_;
  std::string commit_;
  std::string local_path_;
  std::string adapter_path_;
  std::string adapter_name_;
  bool cache_loaded_ = false;
  std::string confirm_delete_;  // "repo@revision" waiting for confirmation
  std::string loaded_key_;      // the loaded model loaded_label_ was read for
  std::string loaded_label_;
  std::map<std::string, std::string> cache_labels_;  // cached snapshot folder -> its weight type
};

}  // namespace cypris
