// The engine flags the CLI commands share for now (--model, --dtype, --max-model-len,
// --load-format, --seed, --rope-scaling, --rope-theta, --threads, --device), parsed in one place. The lead
// replaces this with the global option table in engine/config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/model_runner.h"

namespace cypris::cli {

struct EngineArgs {
  std::string model;
  std::string dtype = "auto";
  std::optional<int64_t> max_model_len;
  std::string load_format = "auto";
  uint64_t seed = 0;
  std::optional<std::string> rope_scaling;
  std::optional<double> rope_theta;
  int threads = 0;
  std::string device = "auto";  // auto | cuda | cpu

  // Takes the engine flags out of args ("--flag value" or "--flag=value") and returns the rest.
  // Throws Error naming the flag for a missing or malformed value.
  std::vector<std::string> parse(const std::vector<std::string>& args);
  ModelRunnerOptions runner_options() const;
  static const char* help();
};

// Helpers for the commands' own flags.
int64_t parse_int_flag(const std::string& flag, const std::string& value);
double parse_double_flag(const std::string& flag, const std::string& value);

// Splits "--flag=value"; returns true and fills value when args[i] is flag (advancing i past a
// separate value). Throws Error when the value is missing.
bool take_flag(const std::vector<std::string>& args, size_t& i, const std::string& flag, std::string& value);

}  // namespace cypris::cli
