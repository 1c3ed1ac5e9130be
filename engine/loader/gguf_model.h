// A GGUF file as a Cypris model: its architecture as a Hugging Face config (from the metadata,
// through a table of per-architecture names), and a WeightSource that serves its tensors under the
// Hugging Face names the models ask for, with llama.cpp's q/k row permutation undone and quantized
// tensors handed over in their own DType.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/loader/gguf.h"
#include "engine/loader/model_config.h"
#include "engine/loader/weights.h"

namespace cypris {

// How one GGUF architecture ("general.architecture") maps to a Cypris model. Add a row to support
// another family; the metadata keys are "{gguf_arch}.{key}" as llama.cpp writes them.
struct GgufArchitecture {
  std::string_view gguf_arch;       // "llama", "qwen2", ...
  std::string_view hf_architecture; // the registry name: "LlamaForCausalLM"
  std::string_view model_type;      // config.json model_type
  bool qkv_bias = false;            // the q/k/v projections have biases
  // llama.cpp's converter reorders q/k rows for its interleaved rotary layout on these
  // architectures; Cypris (like HF) rotates the two halves of each head (neox), so the rows are put back.
  bool permuted_qk = false;
  // Gemma: llama.cpp's converter stores every *norm.weight with Gemma's "1 +" folded in (the reader
  // takes it out again), and names the four norms of a layer attn_norm / post_attention_norm /
  // ffn_norm (pre-feedforward) / post_ffw_norm.
  bool gemma_norms = false;
  // config.json fields the file does not carry because llama.cpp fixes them for this architecture
  // (a JSON object merged over what the metadata gives), e.g. Gemma 3's sliding-window pattern.
  std::string_view fixed_config = "{}";
};
const std::vector<GgufArchitecture>& gguf_architectures();
const GgufArchitecture& gguf_architecture(const GgufModel& model);

// The GGUF tensor name of a Hugging Face one ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"); nullopt when it has none. An expert's weight
// ("model.layers.3.mlp.experts.5.up_proj.weight", Mixtral's "block_sparse_moe.experts.5.w3.weight")
// names the layer's merged tensor ("blk.3.ffn_up_exps.weight", [experts, rows, cols]) with the
// expert's index; files from before the merge hold "blk.3.ffn_up.5.weight" instead, which
// legacy_name gives.
struct GgufTensorRef {
  std::string name;
  int expert = -1;          // >= 0: this expert's slice of the merged tensor
  std::string legacy_name;  // the per-expert 2-D tensor of older files
};
// arch: the file's architecture where names differ by family (Gemma's norms); nullptr for the
// common names.
std::optional<GgufTensorRef> gguf_tensor_ref(std::string_view hf_name, const GgufArchitecture* arch = nullptr);
std::optional<std::string> gguf_tensor_name(std::string_view hf_name, const GgufArchitecture* arch = nullptr);

// The metadata as the config.json the same model would have (architectures, sizes, rope, bos/eos,
// tie_word_embeddings when output.weight is absent). Throws Error naming the file and key.
nlohmann::json gguf_hf_config(const GgufModel& model);
ModelConfig gguf_model_config(const GgufModel& model, const ConfigOverrides& overrides = {});

// Serves the model's tensors. F32/F16/BF16 convert to any plain dtype; a quantized tensor is read
// in its own DType (rows split whole; a split of the row length must be whole blocks), or
// dequantized (bit for bit as ggml does, kernels/cpu/quant) to a plain dtype.
std::unique_ptr<WeightSource> make_gguf_weight_source(std::shared_ptr<const GgufModel> model);

// The DType a GGUF tensor type is read as; nullopt for a type Cypris cannot load.
std::optional<DType> dtype_of_ggml(GgmlType type);

}  // namespace cypris
