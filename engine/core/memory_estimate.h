// What a model will take on the GPU and in RAM, known BEFORE loading it (the desktop app's Quick
// options view, as KoboldCpp's launcher and LM Studio show it): the model's footprint read from its
// headers only (config.json and the safetensors tensor tables, or a GGUF file's metadata and tensor
// infos; no weight is read), the machine's memory (/proc/meminfo, the CUDA device), and a pure
// estimate for a choice of options (--dtype, --kv-cache-dtype, --max-model-len, GPU layers,
// --gpu-memory-utilization, --cpu-kvcache-space, --max-num-seqs).
//
// The estimate's rules, stated so a user can check them:
//  - weights: plain float tensors (F32/F16/BF16) count at --dtype (auto: the checkpoint's rule),
//    quantized ones (GGUF block types; GPTQ/AWQ/compressed-tensors packed tensors and their
//    scales) as stored in the file;
//  - the first `gpu_layers` decoder layers live on the GPU, with the token embedding (the first
//    stage); the final norm and the LM head go with the last layer; a tied LM head split from its
//    embedding counts on both devices;
//  - KV cache bytes per token and layer: 2 (K and V) x kv_heads x head_dim x the cache dtype's bytes;
//  - GPU: weights + the KV of one full-length sequence + kGpuOverheadBytes (CUDA context, cuBLAS,
//    activations) + the GPU sampler's [max-num-seqs, vocab] buffers; the engine then fills
//    --gpu-memory-utilization of the card with KV blocks (sequences_gpu says how many full-length
//    sequences that holds);
//  - --cpu-offload-gb: on each GPU, its last layers up to the GiB asked (weight_offload_plan.h) count
//    in RAM (pinned, once per GPU) instead of on the GPU, which keeps two staging slots of its largest
//    offloaded layer;
//  - RAM: weights + --cpu-kvcache-space (the CPU backend's cache, when the CPU holds layers; its
//    pages are taken as they are used, so this is the most it takes) + kRamOverheadBytes (the
//    process with its CUDA libraries, tokenizer, activations: docs/perf/memory-estimate-2026-11-27.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/weight_offload_plan.h"
#include "engine/config/engine_config.h"

namespace cypris {

inline constexpr int64_t kGpuOverheadBytes = int64_t{512} << 20;
inline constexpr int64_t kRamOverheadBytes = int64_t{256} << 20;

// Weights of one part of the model: float elements (their bytes depend on --dtype) and bytes kept
// as stored (quantized tensors).
struct WeightBytes {
  int64_t float_elems = 0;
  int64_t fixed_bytes = 0;
  int64_t bytes(int64_t float_size) const { return float_elems * float_size + fixed_bytes; }
  WeightBytes& operator+=(const WeightBytes& o) {
    float_elems += o.float_elems;
    fixed_bytes += o.fixed_bytes;
    return *this;
  }
};

struct ModelFootprint {
  std::string path;  // the file or folder read
  std::string architecture;
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;  // the model's own context length
  std::string torch_dtype;    // the checkpoint's ("" when it does not say)
  bool tied_embeddings = false;
  std::vector<WeightBytes> layers;  // [num_layers]
  WeightBytes embedding;            // the token embedding
  WeightBytes head;                 // final norm + LM head (none when tied)
  WeightBytes other;                // anything else the checkpoint holds outside the layers
  bool from_shapes = false;         // no tensor table (PyTorch .bin): weights estimated from config.json
  std::string weight_label;         // "BF16", "GPTQ 4-bit g128", "GGUF Q4_K_M", ...
};

// Reads a model's footprint from a local folder or .gguf file (headers only). Throws Error naming
// the file and field for anything missing or malformed.
ModelFootprint read_model_footprint(const std::filesystem::path& path);

// The local path of --model (+ --gguf-file, --revision, --download-dir) without downloading: a
// folder or .gguf file as is, a repo id from the Hugging Face cache. Throws Error saying what is
// missing (e.g. "not downloaded yet").
std::filesystem::path find_local_model(const ModelOptions& mo);

// "GPTQ 4-bit g128", "AWQ 4-bit g64", "compressed-tensors 8-bit per-channel", "GGUF Q4_K_M",
// "BF16": how a model's weights are stored. From the checkpoint's quantization config, a GGUF
// file's general.file_type (else its most common quantized tensor type), or the torch_dtype.
std::string weight_type_label(const std::filesystem::path& path);
// llama.cpp's name for a general.file_type value ("Q4_K_M"); "" for an unknown one.
std::string gguf_file_type_name(int64_t file_type);

struct GpuMemory {
  std::string name;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};

struct MachineMemory {
  int64_t ram_total_bytes = 0;
  int64_t ram_available_bytes = 0;
  std::optional<GpuMemory> gpu;  // the first CUDA device; none without CUDA or a GPU
};

// MemTotal and MemAvailable of /proc/meminfo's text (kB values); zeros for missing fields.
MachineMemory parse_meminfo(const std::string& text);
// This machine's RAM, and the first CUDA device's memory when query_gpu (this creates the CUDA
// context when the process has none yet).
MachineMemory read_machine_memory(bool query_gpu);

struct MemoryChoice {
  std::string dtype = "auto";           // --dtype
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype
  int64_t context = 0;                  // --max-model-len; 0: the model's
  int gpu_layers = -1;                  // -1: as many as fit
  bool use_gpu = false;                 // a GPU exists and --device allows it
  double gpu_memory_utilization = 0.9;
  double cpu_kvcache_space_gib = 4.0;
  int64_t max_num_seqs = 256;
  // --tensor-parallel-size: on GPUs each holds 1/tp of the weights and of the KV heads (the first
  // device's memory stands for all of them); CPU ranks share the one RAM.
  int tensor_parallel_size = 1;
  double cpu_offload_gb = 0;  // --cpu-offload-gb: GiB of each GPU's layers kept in RAM
};

struct MemoryEstimate {
  int gpu_layers = 0;  // resolved (auto: the most that fit)
  int64_t context = 0;
  int64_t weight_float_size = 0;   // bytes of a float weight at --dtype
  int64_t kv_bytes_per_token = 0;  // all layers and ranks, each at its device's cache dtype
  int gpus = 0;                    // GPUs holding layers (tensor parallel); the gpu_* figures are per GPU
  int64_t gpu_weight_bytes = 0, gpu_kv_bytes = 0, gpu_overhead_bytes = 0;
  int64_t ram_weight_bytes = 0, ram_kv_bytes = 0, ram_overhead_bytes = 0;
  int64_t gpu_total() const { return gpu_weight_bytes + gpu_kv_bytes + gpu_overhead_bytes; }
  int64_t ram_total() const { return ram_weight_bytes + ram_kv_bytes + ram_overhead_bytes; }
  // --cpu-offload-gb on each GPU: its offloaded layers (numbered from its first) and their bytes, which
  // count in ram_weight_bytes (times gpus); the staging slots count in gpu_weight_bytes.
  WeightOffloadPlan offload;
  int64_t gpu_budget_bytes = 0;  // what the engine may use on the card: min(utilization x total, free)
  bool fits_gpu = true;
  bool fits_ram = true;
  // Full-length sequences the KV cache of each device holds (capped at --max-num-seqs); -1 where
  // the device holds no layer.
  int64_t sequences_gpu = -1;
  int64_t sequences_ram = -1;
};

// Pure arithmetic over a footprint; gpu only matters when choice.use_gpu. Throws Error for a bad
// --dtype or --kv-cache-dtype name.
MemoryEstimate estimate_memory(const ModelFootprint& model, const MemoryChoice& choice, const MachineMemory& machine);

}  // namespace cypris
