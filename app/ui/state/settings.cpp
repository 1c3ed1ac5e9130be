// AppSettings persistence; see settings.h.
#include "app/ui/state/settings.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"

namespace cypris {

using json = nlohmann::json;

std::string config_dir() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  if (xdg && *xdg) return (std::filesystem::path(xdg) / "cypris").string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (std::filesystem::path(home) / ".config" / "cypris").string();
  return ".cypris";
}

std::string settings_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "settings.json").string();
}
std::string profiles_dir(const std::string& dir) {
  return (std::filesystem::path(dir) / "profiles").string();
}
std::string last_options_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "last_options.json").string();
}
std::string user_presets_dir(const std::string& dir) {
  return (std::filesystem::path(dir) / "sampler_presets").string();
}

namespace {

template <typename T>
void read_key(const json& j, const char* key, T& out, const std::string& path) {
  if (!j.contains(key)) return;
  try {
    out = j.at(key).get<T>();
  } catch (const json::exception&) {
    CYPRIS_FAIL("{}: key '{}' has the wrong type ({})", path, key, j.at(key).dump());
  }
}

}  // namespace

AppSettings load_settings(const std::string& path) {
  AppSettings s;
  std::ifstream in(path);
  if (!in.good()) return s;
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    CYPRIS_FAIL("{}: not valid JSON: {}", path, e.what());
  }
  CYPRIS_CHECK(j.is_object(), "{}: expected a JSON object", path);
  read_key(j, "last_model", s.last_model, path);
  read_key(j, "last_profile", s.last_profile, path);
  read_key(j, "last_sampler_preset", s.last_sampler_preset, path);
  read_key(j, "system_prompt", s.system_prompt, path);
  read_key(j, "chat_lora", s.chat_lora, path);
  read_key(j, "local_folders", s.local_folders, path);
  read_key(j, "server_host", s.server_host, path);
  read_key(j, "server_port", s.server_port, path);
  read_key(j, "server_api_key", s.server_api_key, path);
  read_key(j, "server_kobold", s.server_kobold, path);
  read_key(j, "font_size", s.font_size, path);
  read_key(j, "window_width", s.window_width, path);
  read_key(j, "window_height", s.window_height, path);
  CYPRIS_CHECK(s.server_port >= 1 && s.server_port <= 65535, "{}: key 'server_port' = {} is not a port (1-65535)", path,
               s.server_port);
  CYPRIS_CHECK(s.font_size >= 6 && s.font_size <= 72, "{}: key 'font_size' = {} is out of range (6-72)", path,
               s.font_size);
  return s;
}

void save_settings(const std::string& path, const AppSettings& s) {
  json j{{"last_model", s.last_model},
         {"last_profile", s.last_profile},
         {"last_sampler_preset", s.last_sampler_preset},
         {"system_prompt", s.system_prompt},
         {"chat_lora", s.chat_lora},
         {"local_folders", s.local_folders},
         {"server_host", s.server_host},
         {"server_port", s.server_port},
         {"server_api_key", s.server_api_key},
         {"server_kobold", s.server_kobold},
         {"font_size", s.font_size},
         {"window_width", s.window_width},
         {"window_height", s.window_height}};
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    CYPRIS_CHECK(out.good(), "{}: cannot write settings", path);
    out << j.dump(2) << "\n";
    CYPRIS_CHECK(out.good(), "{}: cannot write settings", path);
  }
  CYPRIS_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "{}: cannot write settings", path);
}

}  // namespace cypris
