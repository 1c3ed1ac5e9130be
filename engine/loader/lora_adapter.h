// LoRA adapters in Hugging Face PEFT's format, read from a folder: adapter_config.json plus
// adapter_model.safetensors (or adapter_model.bin through the safe torch reader). Each adapted
// linear layer W [out, in] gets A [r, in] and B [out, r]; the layer then computes
// x·Wᵀ + scale·(x·Aᵀ)·Bᵀ with scale = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora
// (PEFT's definitions). What Cypris cannot apply (modules_to_save, embedding LoRA, DoRA, trained
// biases, per-module ranks) is refused by name; which base-model layers the modules must fit is
// checked where the model's layers are (models/layers/lora.h). llama.cpp's GGUF LoRA files are read
// too (lora_gguf_adapter.cpp).
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
  // A GGUF adapter: the llama.cpp architecture it was converted for (general.architecture); its q/k
  // B rows are in llama.cpp's order when that architecture permutes them, until
  // undo_gguf_qk_permutation. "" for a PEFT folder.
  std::string gguf_arch;
  // By the base model's weight name without ".weight": "model.layers.0.self_attn.q_proj".
  std::map<std::string, LoraModule> modules;
  // Bytes of the A and B matrices as loaded (fp32).
  size_t nbytes() const;
};

// Reads and checks the adapter in dir (a PEFT folder, or a llama.cpp GGUF LoRA file). max_rank:
// --max-lora-rank. Throws Error naming the file, key or field and what is allowed.
LoraAdapter load_lora_adapter(const std::filesystem::path& dir, int64_t max_rank);

// llama.cpp's GGUF LoRA file (convert_lora_to_gguf.py): general.type "adapter", adapter.type "lora",
// adapter.lora.alpha, "blk.N.<tensor>.weight.lora_a" / ".lora_b". Scale alpha / r (1 when alpha is 0).
LoraAdapter load_gguf_lora_adapter(const std::filesystem::path& file, int64_t max_rank);
// Puts the q_proj / k_proj B rows of a GGUF adapter back from llama.cpp's interleaved rotary order
// (architectures whose converter permutes them, GgufArchitecture::permuted_qk) into Hugging Face's.
// Error naming the module when its rows do not split into the heads.
void undo_gguf_qk_permutation(LoraAdapter& a, int64_t heads, int64_t kv_heads);

// PEFT's scaling: alpha / rank, or alpha / sqrt(rank) when use_rslora.
float lora_scale(double alpha, int64_t rank, bool use_rslora);

}  // namespace cypris
