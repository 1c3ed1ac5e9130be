#include "tests/support/stories_server.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/core/async_engine.h"

namespace cypris::testing_support {

std::string stories260k_dir() {
  return std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
}

StoriesServer start_stories_server(const std::function<void(EngineConfig&)>& tweak) {
  EngineConfig cfg;
  cfg.model.model = stories260k_dir();
  cfg.model.dtype = "float32";
  cfg.model.served_model_name = {"stories"};
  cfg.device.device = "cpu";
  cfg.device.threads = 2;
  cfg.cache.cpu_kvcache_space = 0.05;
  cfg.logging.disable_log_stats = true;
  cfg.server.host = "127.0.0.1";
  cfg.server.port = 0;
  cfg.server.launch_kobold_api = true;
  if (tweak) tweak(cfg);
  auto factory = [](const EngineConfig& c) -> std::shared_ptr<EngineClient> {
    return std::make_shared<AsyncEngine>(c);
  };
  StoriesServer s;
  s.server = std::make_unique<Server>(cfg, factory, factory(cfg));
  s.port = s.server->start();
  return s;
}

int run_guided_judge(const std::vector<nlohmann::json>& cases) {
  static std::atomic<int> counter{0};
  const auto path = std::filesystem::temp_directory_path() /
                    ("cypris_judge_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".jsonl");
  {
    std::ofstream out(path);
    for (auto& c : cases) out << c.dump() << "\n";
  }
  // Debian's interpreter: python3-jsonschema and python3-lark are installed for it (a python3
  // earlier on PATH, e.g. pyenv's, would not see them).
  const std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string cmd =
      python + " " + std::string(CYPRIS_SOURCE_DIR) + "/tests/tools/guided_judge.py " + path.string();
  const int rc = std::system(cmd.c_str());
  std::filesystem::remove(path);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace cypris::testing_support
