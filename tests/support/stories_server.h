// A real HTTP server on the stories260k test model (CPU), for the integration tests that judge
// what the whole product path returns (structured output, tool calls), and the way those tests run
// the independent judge of JSON outputs (tests/tools/guided_judge.py: python3-jsonschema, -lark).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/server/server.h"
#include "engine/config/engine_config.h"

namespace cypris::testing_support {

// The stories260k model folder in the test data.
std::string stories260k_dir();

// stories260k on the CPU, 2 threads, served as "stories" on 127.0.0.1 (a free port), Kobold on;
// tweak may change the config before the engine starts. The port is server->port().
struct StoriesServer {
  std::unique_ptr<Server> server;
  int port = 0;
};
StoriesServer start_stories_server(const std::function<void(EngineConfig&)>& tweak = {});

// Runs guided_judge.py over JSON lines {"kind", "spec", "outputs", "finished"}; its exit status:
// 0 every finished output passed, 77 a judge package is missing (the test skips), else failures.
int run_guided_judge(const std::vector<nlohmann::json>& cases);

}  // namespace cypris::testing_support
