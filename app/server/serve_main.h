// `cypris --no-ui`: build the engine, serve until SIGINT or SIGTERM, stop cleanly.
#pragma once

#include <functional>
#include <memory>

#include "app/server/server.h"
#include "engine/config/engine_config.h"

namespace cypris {

// Blocks SIGINT/SIGTERM (in every thread started afterwards), builds the engine with make_engine,
// starts the server and waits for a signal with sigwait; then stops the server (in-flight requests
// are cut off and answered 503) and drops the engine. Returns the process exit code (0 after a
// signal, 1 when the engine or the listening socket cannot be set up; the error is logged). Should
// the shutdown take more than 10 s, or a second signal come, the process exits at once with 1. Call it
// from the main thread before starting other threads.
int serve_forever(const EngineConfig& cfg,
                  std::function<std::shared_ptr<EngineClient>(const EngineConfig&)> make_engine);

}  // namespace cypris
