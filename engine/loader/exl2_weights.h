// The weight source of an EXL2 checkpoint (exllamav2's format: kernels/cpu/quant/exl2_layout.h):
// every linear layer stored as q_weight / q_scale / q_scale_max / q_groups / q_invperm (/ q_perm) is
// offered to the model under its plain name (`...q_proj.weight`) and read dequantized, exactly, in
// the model's dtype, with the input permutation undone (the layers are not kept at their bits yet:
// Cypris's block types hold one width per tensor and no column order). Every tensor is checked
// against the others and against the [out, in] the model expects; a mismatch is an error naming the
// file, the tensor and the shape or values allowed. The other tensors come from the plain source.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/loader/quant_config.h"
#include "engine/loader/weights.h"

namespace cypris {

// Older EXL2 checkpoints have no quantization_config: a safetensors folder whose tensors include a
// `*.q_invperm` is EXL2 (QuantConfig{method "exl2"}, source naming the tensor). nullopt otherwise.
// ignore_patterns: --ignore-patterns (files not read).
std::optional<QuantConfig> exl2_config_from_tensors(const std::filesystem::path& dir,
                                                    const std::vector<std::string>& ignore_patterns);

std::unique_ptr<WeightSource> make_exl2_weight_source(const std::filesystem::path& dir, const QuantConfig& q,
                                                      std::unique_ptr<WeightSource> plain);

}  // namespace cypris
