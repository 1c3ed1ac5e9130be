// Rotary embedding frequencies for every RoPE variant the Llama family uses, computed the way
// Hugging Face transformers does (modeling_rope_utils: _compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters, _compute_dynamic_ntk_parameters,
// _compute_yarn_parameters, _compute_llama3_parameters, _compute_longrope_parameters), in float32
// like transformers.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/loader/model_config.h"

namespace cypris {

struct RopeParameters {
  std::vector<float> inv_freq;    // [rotary_dim / 2]
  float attention_factor = 1.0f;  // multiplies cos and sin (yarn's mscale)
};

// seq_len only matters for "dynamic" (transformers passes max(position_ids) + 1).
RopeParameters compute_rope_parameters(const ModelConfig& cfg, std::optional<int64_t> seq_len = std::nullopt);

// cos/sin table [max_len, rotary_dim]: rotary_dim/2 cosines, then rotary_dim/2 sines per position,
// already multiplied by the attention factor. For "dynamic", position p uses the frequencies for
// seq_len = p + 1 once p reaches max_position_embeddings, as transformers does when decoding token
// by token (a full prefill past the original length uses one base for all positions there).
std::vector<float> build_rope_cos_sin(const ModelConfig& cfg, int64_t max_len);

}  // namespace cypris
