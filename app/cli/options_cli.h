// Shared command-line handling for every mode: parse the option table (plus a subcommand's own
// options), answer --help/--help-json/--version, validate, set the log level, log warnings.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "engine/config/options.h"

namespace cypris::cli {

struct CliContext {
  EngineConfig cfg;
  ParseResult parsed;
};

// Returns the parsed options, or std::nullopt when the program should exit with exit_code
// (help printed: 0; bad options: 2, with the message on stderr).
std::optional<CliContext> parse_cli(const Args& args, const std::string& usage, int& exit_code,
                                    const std::vector<OptionSpec>& extra = {}, EngineConfig defaults = {});

// Runs fn, turning any exception into a message on stderr and exit code 1.
int run_guarded(const char* what, int (*fn)(const Args&), const Args& args);

}  // namespace cypris::cli
