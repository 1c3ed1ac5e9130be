#include "engine/core/engine_setup.h"

#include <fmt/format.h>

#include <regex>

#include "engine/common/error.h"
#include "engine/config/kv_cache_dtype.h"
#include "engine/core/distributed_setup.h"
#include "engine/hub/hub.h"
#include "engine/loader/gguf.h"
#include "engine/backend/backend_factory.h"

namespace cypris {

std::filesystem::path resolve_local_model_dir(const std::string& model, const std::optional<std::string>& revision,
                                              const std::optional<std::string>& download_dir,
                                              const std::vector<std::string>& ignore_patterns) {
  CYPRIS_CHECK(!model.empty(), "--model is required: a local model folder, a .gguf file or a Hugging Face repo id");
  if (std::filesystem::is_directory(model)) return model;
  if (std::filesystem::is_regular_file(model)) {
    CYPRIS_CHECK(is_gguf_path(model), "--model '{}' is a file but not a GGUF file; pass a model folder, a .gguf file or "
                 "a repo id", model);
    return model;
  }
  try {
    return hub::resolve_model_dir(model, revision.value_or("main"), download_dir.value_or(""),
                                  /*allow_download=*/true, ignore_patterns);
  } catch (const hub::HubError& e) {
    CYPRIS_FAIL("--model '{}': {}", model, e.what());
  }
}

std::filesystem::path resolve_model_path(const ModelOptions& mo) {
  if (!mo.gguf_file || mo.gguf_file->empty()) {
    return resolve_local_model_dir(mo.model, mo.revision, mo.download_dir, mo.ignore_patterns);
  }
  const std::string& name = *mo.gguf_file;
  CYPRIS_CHECK(name.find("..") == std::string::npos && name.front() != '/',
               "--gguf-file '{}' must be a file name inside the repo (no '..', not absolute)", name);
  CYPRIS_CHECK(name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0,
               "--gguf-file '{}' must name a .gguf file", name);
  CYPRIS_CHECK(!mo.model.empty(), "--gguf-file needs --model: the repo id or folder that holds the file");
  if (std::filesystem::is_directory(mo.model)) {
    const auto path = std::filesystem::path(mo.model) / name;
    CYPRIS_CHECK(std::filesystem::is_regular_file(path), "--gguf-file '{}': {} does not exist", name, path.string());
    return path;
  }
  try {
    hub::HubClient client;
    hub::DownloadOptions opt;
    opt.revision = mo.revision.value_or("main");
    opt.download_dir = mo.download_dir.value_or("");
    // One file, not the repo: GGUF repos hold every quantization of the model.
    std::string path = client.download_file(mo.model, name, opt);
    // The other parts of a split model.
    static const std::regex kSplit(R"((.*)-00001-of-(\d{5})\.gguf)");
    std::smatch m;
    if (std::regex_match(name, m, kSplit)) {
      const int count = std::stoi(m[2].str());
      for (int i = 2; i <= count; ++i) {
        client.download_file(mo.model, fmt::format("{}-{:05d}-of-{:05d}.gguf", m[1].str(), i, count), opt);
      }
    }
    return path;
  } catch (const hub::HubError& e) {
    CYPRIS_FAIL("--model '{}' --gguf-file '{}': {}", mo.model, name, e.what());
  }
}

ModelRunnerOptions runner_options(const EngineConfig& cfg, const std::filesystem::path& model_dir,
                                  bool ranks_in_this_process) {
  const auto& mo = cfg.model;
  ModelRunnerOptions ro;
  ro.model_dir = model_dir;
  const bool gguf = is_gguf_path(model_dir);
  CYPRIS_CHECK(!cfg.quant.quantization || *cfg.quant.quantization != "gguf" || gguf,
               "--quantization gguf: --model {} is not a GGUF file (pass a .gguf file or --gguf-file NAME)",
               model_dir.string());
  ro.load.dtype = mo.dtype;
  ro.load.load_format = mo.load_format;
  ro.load.seed = static_cast<uint64_t>(mo.seed);
  ro.load.quantization = cfg.quant.quantization;
  ro.load.load_in_8bit = cfg.quant.load_in_8bit;
  ro.load.load_in_4bit = cfg.quant.load_in_4bit;
  if (!mo.rope_scaling.empty()) ro.load.overrides.rope_scaling_json = mo.rope_scaling;
  ro.load.overrides.rope_theta = mo.rope_theta;
  ro.load.overrides.max_model_len = mo.max_model_len;
  ro.load.overrides.disable_sliding_window = mo.disable_sliding_window;
  ro.load.ignore_patterns = mo.ignore_patterns;
  ro.threads = static_cast<int>(cfg.device.threads.value_or(0));
  ro.block_size = static_cast<int>(cfg.cache.block_size);
  // Pipeline stages in this process (docs/distributed.md); the runner checks them against the model.
  CYPRIS_CHECK(cfg.parallel.pipeline_parallel_size >= 1 && cfg.parallel.pipeline_parallel_size <= 1024,
               "--pipeline-parallel-size {} must be in [1, 1024]", cfg.parallel.pipeline_parallel_size);
  ro.pipeline_stages = static_cast<int>(cfg.parallel.pipeline_parallel_size);
  ro.parallel.world_size = static_cast<int>(cfg.parallel.tensor_parallel_size);
  // Starts MPI and checks the world under --distributed-executor-backend mpi.
  ro.mpi = !ranks_in_this_process && use_mpi_processes(cfg);
  if (cfg.device.gpu_layers) {
    CYPRIS_CHECK(*cfg.device.gpu_layers >= -1 && *cfg.device.gpu_layers <= 100000,
                 "--gpu-layers {} must be -1 (auto) or a number of layers", *cfg.device.gpu_layers);
    CYPRIS_CHECK(cfg.device.device == "auto" || cfg.device.device == "cuda",
                 "--gpu-layers splits the model between the GPU and the CPU; it needs --device auto or cuda, not {}",
                 cfg.device.device);
    ro.gpu_layers = static_cast<int>(*cfg.device.gpu_layers);
  }
  // With --gpu-layers the runner places each stage itself (the GPU part needs a GPU only when it
  // gets layers).
  ro.device = resolve_device(cfg.device.device);
  // The KV cache: the runner sizes it for every device (model_runner.h, num_blocks).
  ro.num_blocks = cfg.cache.num_gpu_blocks_override.value_or(0);
  ro.gpu_memory_utilization = cfg.cache.gpu_memory_utilization;
  ro.cpu_offload_gb = cfg.cache.cpu_offload_gb;
  if (ro.device == "cpu" || ro.gpu_layers) {
    ro.cpu_kv_cache_bytes = cfg.cache.cpu_kvcache_space * 1024.0 * 1024.0 * 1024.0;
  }
  ro.max_num_seqs = cfg.scheduler.max_num_seqs;
  // Decode CUDA graphs are captured once the cache exists (model_runner.cpp, decode_graphs.h).
  ro.enforce_eager = mo.enforce_eager;
  ro.max_seq_len_to_capture = mo.max_context_len_to_capture.value_or(mo.max_seq_len_to_capture);
  ro.kv_cache_dtype = parse_kv_cache_dtype(cfg.quant.kv_cache_dtype);
  // "auto" on the CPU: a float16 cache, as llama.cpp's default: half the bytes of float32 per token
  // (twice the context in --cpu-kvcache-space, half the reads per decoded token at long contexts).
  if (!ro.kv_cache_dtype && ro.device == "cpu" && !ro.gpu_layers) ro.kv_cache_dtype = DType::F16;
  ro.quantization_param_path = cfg.quant.quantization_param_path.value_or("");
  return ro;
}

}  // namespace cypris
