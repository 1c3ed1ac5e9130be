// --kv-cache-dtype: its names and the cache element type each one means, written once. The option
// table takes its choices from here, the engine set-up parses the flag with it, and the model runner
// receives the parsed type (RunnerOptions::kv_cache_dtype).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/common/dtype.h"

namespace cypris {

// The accepted names in --help order: auto, fp8, fp8_e5m2, fp8_e4m3, float16, bfloat16, float32.
const std::vector<std::string>& kv_cache_dtype_names();

// "auto" -> nullopt (the runner's default: the activation dtype; the engine makes it float16 on the
// CPU, engine_setup.cpp), "fp8" and "fp8_e4m3" -> F8E4M3 (as vLLM), "fp8_e5m2" -> F8E5M2; "float16",
// "bfloat16" and "float32" name a cache of that type on any device. Throws Error naming
// --kv-cache-dtype and the choices otherwise.
std::optional<DType> parse_kv_cache_dtype(const std::string& name);

}  // namespace cypris
