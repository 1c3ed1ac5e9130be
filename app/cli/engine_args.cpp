#include "app/cli/engine_args.h"

#include <charconv>

#include "engine/common/error.h"

namespace cypris::cli {

int64_t parse_int_flag(const std::string& flag, const std::string& value) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  CYPRIS_CHECK(ec == std::errc() && p == value.data() + value.size(), "{}: '{}' is not an integer", flag, value);
  return v;
}

double parse_double_flag(const std::string& flag, const std::string& value) {
  try {
    size_t pos = 0;
    const double v = std::stod(value, &pos);
    CYPRIS_CHECK(pos == value.size(), "{}: '{}' is not a number", flag, value);
    return v;
  } catch (const std::logic_error&) {
    CYPRIS_FAIL("{}: '{}' is not a number", flag, value);
  }
}

bool take_flag(const std::vector<std::string>& args, size_t& i, const std::string& flag, std::string& value) {
  const std::string& a = args[i];
  if (a == flag) {
    CYPRIS_CHECK(i + 1 < args.size(), "{} needs a value", flag);
    value = args[++i];
    return true;
  }
  if (a.size() > flag.size() && a.compare(0, flag.size(), flag) == 0 && a[flag.size()] == '=') {
    value = a.substr(flag.size() + 1);
    return true;
  }
  return false;
}

std::vector<std::string> EngineArgs::parse(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    if (take_flag(args, i, "--model", v)) {
      model = v;
    } else if (take_flag(args, i, "--dtype", v)) {
      dtype = v;
    } else if (take_flag(args, i, "--max-model-len", v)) {
      max_model_len = parse_int_flag("--max-model-len", v);
    } else if (take_flag(args, i, "--load-format", v)) {
      load_format = v;
    } else if (take_flag(args, i, "--seed", v)) {
      const int64_t s = parse_int_flag("--seed", v);
      CYPRIS_CHECK(s >= 0, "--seed must be non-negative, got {}", s);
      seed = static_cast<uint64_t>(s);
    } else if (take_flag(args, i, "--rope-scaling", v)) {
      rope_scaling = v;
    } else if (take_flag(args, i, "--rope-theta", v)) {
      rope_theta = parse_double_flag("--rope-theta", v);
    } else if (take_flag(args, i, "--threads", v)) {
      const int64_t t = parse_int_flag("--threads", v);
      CYPRIS_CHECK(t >= 0 && t <= 1024, "--threads must be in [0, 1024] (0: all cores), got {}", t);
      threads = static_cast<int>(t);
    } else if (take_flag(args, i, "--device", v)) {
      device = v;
    } else {
      rest.push_back(args[i]);
    }
  }
  return rest;
}

ModelRunnerOptions EngineArgs::runner_options() const {
  CYPRIS_CHECK(!model.empty(), "--model is required (a local folder with config.json)");
  ModelRunnerOptions o;
  o.model_dir = model;
  o.load.dtype = dtype;
  o.load.load_format = load_format;
  o.load.seed = seed;
  o.load.overrides.max_model_len = max_model_len;
  o.load.overrides.rope_scaling_json = rope_scaling;
  o.load.overrides.rope_theta = rope_theta;
  o.threads = threads;
  o.device = device;
  o.gpu_memory_utilization = 0.0;  // one sequence of --max-model-len: these commands run one request
  return o;
}

const char* EngineArgs::help() {
  return "engine flags:\n"
         "  --model DIR              local model folder (config.json + *.safetensors)\n"
         "  --dtype D                auto|half|float16|bfloat16|float|float32 (auto: FP16 for FP32/FP16 models,\n"
         "                           BF16 for BF16 models; the CPU computes in fp32 either way)\n"
         "  --max-model-len N        context length (default: max_position_embeddings)\n"
         "  --load-format F          auto|safetensors|dummy (dummy: seeded random weights)\n"
         "  --seed S                 random seed (dummy weights, sampling)\n"
         "  --rope-scaling JSON      e.g. '{\"rope_type\":\"dynamic\",\"factor\":2.0}'\n"
         "  --rope-theta X           RoPE base override\n"
         "  --threads N              CPU threads (0: all cores)\n"
         "  --device D               auto|cuda|cpu (auto: CUDA when the build has it and a GPU is present)\n";
}

}  // namespace cypris::cli
