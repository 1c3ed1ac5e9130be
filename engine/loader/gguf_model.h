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
#include "engine/loader/model_family.h"
#include "engine/loader/weights.h"

namespace cypris {

// The row of the file's general.architecture (model_family.h), or Error listing the supported ones.
const GgufArchitecture& gguf_architecture(const ModelFamilies& families, const GgufModel& model);

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
// arch: the file's architecture, whose own layer names (GgufArchitecture::layer_names, e.g. Gemma's
// four norms) are looked up first; nullptr for the common names.
std::optional<GgufTensorRef> gguf_tensor_ref(std::string_view hf_name, const GgufArchitecture* arch = nullptr);
std::optional<std::string> gguf_tensor_name(std::string_view hf_name, const GgufArchitecture* arch = nullptr);

// The metadata as the config.json the same model would have (architectures, sizes, rope, bos/eos,
// tie_word_embeddings when output.weight is absent). Throws Error naming the file and key.
nlohmann::json gguf_hf_config(const ModelFamilies& families, const GgufModel& model);
ModelConfig gguf_model_config(const ModelFamilies& families, const GgufModel& model,
                              const ConfigOverrides& overrides = {});

// Serves the model's tensors. F32/F16/BF16 convert to any plain dtype; a quantized tensor is read
// in its own DType (rows split whole; a split of the row length must be whole blocks), or
// dequantized (bit for bit as ggml does, kernels/cpu/quant) to a plain dtype.
std::unique_ptr<WeightSource> make_gguf_weight_source(const ModelFamilies& families,
                                                     std::shared_ptr<const GgufModel> model);

// The DType a GGUF tensor type is read as; nullopt for a type Cypris cannot load.
std::optional<DType> dtype_of_ggml(GgmlType type);

}  // namespace cypris
