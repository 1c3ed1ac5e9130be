// LoRA adapters in Hugging Face PEFT's format, read from a folder: adapter_config.json plus
// adapter_model.safetensors (or adapter_model.bin through the safe torch reader). Each adapted
// linear layer W [out, in] gets A [r, in] and B [out, r]; the layer then computes
// x·Wᵀ + scale·(x·Aᵀ)·Bᵀ with scale = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora
// (PEFT's definitions). What Cypris cannot apply (modules_to_save, embedding LoRA, DoRA, trained
// biases, per-module ranks, GGUF adapters) is refused by name; which base-model layers the modules
// must fit is checked where the model's layers are (models/layers/lora.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/loader/weights.h"

namespace cypris {

struct LoraModule {
  HostTensor a;  // F32 [rank, in]
  HostTensor b;  // F32 [out, rank]
};

struct LoraAdapter {
  std::string path;
  int64_t rank = 0;
  double alpha = 0;
  bool use_rslora = false;
  float scale = 0;  // alpha / rank, or alpha / sqrt(rank) with use_rslora
  std::string base_model;  // base_model_name_or_path, informational ("" when absent)
  // By the base model's weight name without ".weight": "model.layers.0.self_attn.q_proj".
  std::map<std::string, LoraModule> modules;
  // Bytes of the A and B matrices as loaded (fp32).
  size_t nbytes() const;
};

// Reads and checks the adapter in dir. max_rank: --max-lora-rank. Throws Error naming the file, key
// or field and what is allowed.
LoraAdapter load_lora_adapter(const std::filesystem::path& dir, int64_t max_rank);

// PEFT's scaling: alpha / rank, or alpha / sqrt(rank) when use_rslora.
float lora_scale(double alpha, int64_t rank, bool use_rslora);

}  // namespace cypris
