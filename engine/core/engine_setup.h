// From EngineConfig to what the runtime takes: the local model folder and ModelRunnerOptions.
// Shared by the Engine and the benchmarks that drive a ModelRunner directly.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "engine/config/engine_config.h"
#include "engine/runtime/model_runner.h"

namespace cypris {

// The local folder of a model: a folder is used as it is; a Hugging Face repo id at a revision
// (branch, tag or commit) is served from the Hugging Face cache, downloading what is missing
// (HF_HUB_OFFLINE: cache only). Throws Error naming --model and what went wrong.
std::filesystem::path resolve_local_model_dir(const std::string& model, const std::optional<std::string>& revision,
                                              const std::optional<std::string>& download_dir,
                                              const std::vector<std::string>& ignore_patterns = {});

// The model of --model (+ --gguf-file, --revision, --download-dir): a folder, a .gguf file, or a
// repo id resolved as above; with --gguf-file only that file of the repo (or folder) is fetched and
// its path returned. Throws Error naming the flag.
std::filesystem::path resolve_model_path(const ModelOptions& mo);

// Runner options for cfg's model, the KV cache budget included (the runner sizes the cache for every
// device); max_num_batched_tokens is the caller's (it needs the model's max_model_len). Under
// --distributed-executor-backend mpi the ranks are the MPI processes, unless ranks_in_this_process
// (a speculative draft model, which runs in process 0 only): then they are threads of this process.
ModelRunnerOptions runner_options(const EngineConfig& cfg, const std::filesystem::path& model_dir,
                                  bool ranks_in_this_process = false);

}  // namespace cypris
