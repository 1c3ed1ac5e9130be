#include "app/cli/options_cli.h"

#include <cstdio>
#include <exception>

#include "engine/common/error.h"
#include "engine/common/log.h"

namespace cypris::cli {

std::optional<CliContext> parse_cli(const Args& args, const std::string& usage, int& exit_code,
                                    const std::vector<OptionSpec>& extra, EngineConfig defaults) {
  CliContext ctx{std::move(defaults), {}};
  try {
    ctx.parsed = parse_options(args, ctx.cfg, extra);
    if (ctx.parsed.help) {
      std::fputs(help_text(usage, extra).c_str(), stdout);
      exit_code = 0;
      return std::nullopt;
    }
    if (ctx.parsed.help_json) {
      std::puts(help_json(extra).dump(2).c_str());
      exit_code = 0;
      return std::nullopt;
    }
    if (ctx.parsed.help_markdown) {
      std::fputs(option_reference_markdown().c_str(), stdout);
      exit_code = 0;
      return std::nullopt;
    }
    if (ctx.parsed.version) {
      std::printf("cypris %s\n", CYPRIS_VERSION);
      exit_code = 0;
      return std::nullopt;
    }
    set_log_level(ctx.cfg.logging.log_level);
    for (const auto& w : validate_options(ctx.cfg, ctx.parsed.explicit_keys)) LOG_WARN("{}", w);
  } catch (const Error& e) {
    std::fprintf(stderr, "cypris: error: %s\n", e.what());
    exit_code = 2;
    return std::nullopt;
  }
  return ctx;
}

int run_guarded(const char* what, int (*fn)(const Args&), const Args& args) {
  try {
    return fn(args);
  } catch (const Error& e) {
    std::fprintf(stderr, "cypris %s: error: %s\n", what, e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cypris %s: internal error: %s\n", what, e.what());
  }
  return 1;
}

}  // namespace cypris::cli
