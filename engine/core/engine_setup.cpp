#include "engine/core/engine_setup.h"

#include <fmt/format.h>

#include "engine/common/error.h"
#include "engine/loader/hub/hub.h"
#include "engine/backend/backend_factory.h"
#include "engine/runtime/kv_cache_scales.h"

namespace cypris {

std::filesystem::path resolve_local_model_dir(const std::string& model, const std::optional<std::string>& revision,
                                              const std::optional<std::string>& download_dir) {
  CYPRIS_CHECK(!model.empty(), "--model is required: a local model folder or a Hugging Face repo id");
  if (std::filesystem::is_directory(model)) return model;
  try {
    return hub::resolve_model_dir(model, revision.value_or("main"), download_dir.value_or(""),
                                  /*allow_download=*/true);
  } catch (const hub::HubError& e) {
    CYPRIS_FAIL("--model '{}': {}", model, e.what());
  }
}

ModelRunnerOptions runner_options(const EngineConfig& cfg, const std::filesystem::path& model_dir) {
  const auto& mo = cfg.model;
  ModelRunnerOptions ro;
  ro.model_dir = model_dir;
  ro.load.dtype = mo.dtype;
  ro.load.load_format = mo.load_format;
  ro.load.seed = static_cast<uint64_t>(mo.seed);
  if (!mo.rope_scaling.empty()) ro.load.overrides.rope_scaling_json = mo.rope_scaling;
  ro.load.overrides.rope_theta = mo.rope_theta;
  ro.load.overrides.max_model_len = mo.max_model_len;
  ro.threads = static_cast<int>(cfg.device.threads.value_or(0));
  ro.block_size = static_cast<int>(cfg.cache.block_size);
  CYPRIS_CHECK(cfg.parallel.pipeline_parallel_size == 1,
               "--pipeline-parallel-size {}: pipeline parallelism is not supported yet in Cypris (see "
               "docs/distributed.md)",
               cfg.parallel.pipeline_parallel_size);
  ro.parallel.world_size = static_cast<int>(cfg.parallel.tensor_parallel_size);
  ro.device = resolve_device(cfg.device.device);
  // The KV cache: the runner sizes it for every device (model_runner.h, num_blocks).
  ro.num_blocks = cfg.cache.num_gpu_blocks_override.value_or(0);
  ro.gpu_memory_utilization = cfg.cache.gpu_memory_utilization;
  if (ro.device == "cpu") ro.cpu_kv_cache_bytes = cfg.cache.cpu_kvcache_space * 1024.0 * 1024.0 * 1024.0;
  ro.max_num_seqs = cfg.scheduler.max_num_seqs;
  ro.kv_cache_dtype = parse_kv_cache_dtype(cfg.quant.kv_cache_dtype);
  ro.quantization_param_path = cfg.quant.quantization_param_path.value_or("");
  return ro;
}

}  // namespace cypris
