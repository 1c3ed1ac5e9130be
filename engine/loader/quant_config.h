// The quantization of a Hub checkpoint: its `quantization_config` (config.json) or
// quantize_config.json, which method Cypris loads it with (-q / --quantization may force one, and
// must then agree with the checkpoint), and the refusals of what is not implemented, by name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace cypris {

struct QuantConfig {
  std::string method;               // "gptq", "awq", "compressed-tensors", "fp8", "exl2" or "bitsandbytes"
  int bits = 0;                     // 2, 4, 8 (GPTQ), 4 (AWQ)
  int64_t group_size = -1;          // values per scale along a row; -1: one group per row
  bool desc_act = false;            // GPTQ act-order: g_idx is not in order
  bool sym = true;                  // GPTQ symmetric (zeros all 2^(bits-1))
  bool zero_point_plus_one = true;  // GPTQ v1 checkpoints store zero - 1 (checkpoint_format gptq)
  std::string checkpoint_format;    // gptq, gptq_v2 (GPTQ); gemm (AWQ version); pack-quantized, float-quantized
                                    // (compressed-tensors); nf4, fp4 (bitsandbytes 4-bit)
  // FP8 weights (quant_method fp8, compressed-tensors float-quantized): how the scales are laid out.
  std::string scale_strategy;       // "tensor", "channel", "block", or "" = from the weight_scale's shape (fp8)
  int64_t block_n = 0, block_k = 0;  // "block": weight_block_size [rows, columns]
  std::string act_scheme;           // activations the checkpoint quantizes: "dynamic", "static", "" (none)
  // EXL2 (exllamav2): the average bits per weight and the lm_head's bits the config states (each layer's
  // groups carry their own widths in the tensors; engine/loader/exl2_weights.h).
  double bits_per_weight = 0;
  int head_bits = 0;
  bool double_quant = false;        // bitsandbytes: bnb_4bit_use_double_quant (nested absmax)
  std::string source;               // the file it was read from, for messages

  // One line for the load log: "gptq 4-bit, group size 128, desc_act false, sym true, format gptq".
  std::string summary() const;
};

// The checkpoint's quantization from DIR/config.json's quantization_config, else
// DIR/quantize_config.json; nullopt when it has neither. Anything malformed or unsupported is an
// Error naming the file, the field and what is allowed.
std::optional<QuantConfig> read_quant_config(const std::filesystem::path& dir);

// Parses a quantization_config object (JSON text); source names it in messages.
QuantConfig parse_quant_config(const std::string& json_text, const std::string& source);

// The method to load with: the checkpoint's, checked against `requested` (-q; nullopt when not
// given). A -q without a quantized checkpoint, or one that names another method, is an Error naming
// both. nullopt: the checkpoint is not quantized and nothing was requested.
std::optional<QuantConfig> resolve_quantization(const std::optional<QuantConfig>& checkpoint,
                                                const std::optional<std::string>& requested, const std::string& model);

}  // namespace cypris
