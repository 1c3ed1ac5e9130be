// The desktop app's persistent settings (window, server switch values, system prompt, the last
// model and profile, local model folders), kept as settings.json in the XDG config folder
// ($XDG_CONFIG_HOME/cypris, else ~/.config/cypris) next to profiles/ and last_options.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cypris {

struct AppSettings {
  std::string last_model;           // --model of the last successful load
  std::string last_profile;         // name of the last profile loaded or saved
  std::string last_sampler_preset;  // name of the last sampler preset applied
  std::string system_prompt;
  std::string chat_lora;                   // the chat's LoRA adapter by name (empty: the base model)
  std::vector<std::string> local_folders;  // model folders the user added in the Models panel
  std::string server_host = "localhost";
  int64_t server_port = 2242;
  std::string server_api_key;
  bool server_kobold = true;
  double font_size = 16.0;  // points before DPI scaling
  int64_t window_width = 1280;
  int64_t window_height = 800;
};

// The config folder: $XDG_CONFIG_HOME/cypris, else $HOME/.config/cypris, else ./.cypris.
std::string config_dir();
std::string settings_path(const std::string& dir);      // dir/settings.json
std::string profiles_dir(const std::string& dir);       // dir/profiles
std::string last_options_path(const std::string& dir);  // dir/last_options.json
std::string user_presets_dir(const std::string& dir);   // dir/sampler_presets

// Missing file: defaults. A file that does not parse, or a key of the wrong type, throws
// cypris::Error naming the file and key (the app then starts with defaults and says so).
AppSettings load_settings(const std::string& path);
// Writes atomically (temp file + rename), creating the folder.
void save_settings(const std::string& path, const AppSettings& s);

}  // namespace cypris
