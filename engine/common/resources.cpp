#include "engine/common/resources.h"

#include <unistd.h>

#include <cstdlib>
#include <system_error>

namespace cypris {

std::filesystem::path resources_dir() {
  if (const char* env = std::getenv("CYPRIS_RESOURCES_DIR"); env && *env) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "share" / "cypris";
    if (std::filesystem::is_directory(installed / "chat_templates", ec)) return installed;
  }
  return CYPRIS_RESOURCES_DIR;
}

}  // namespace cypris
