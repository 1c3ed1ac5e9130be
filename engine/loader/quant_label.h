// A short label of a checkpoint's quantization for display (the Models panel, the load log):
// "GPTQ 4-bit g128", "AWQ 4-bit g128", "compressed-tensors W4A16 g128", "FP8 block 128x128",
// "FP8 per-channel W8A8 dynamic". A method Cypris cannot load is labelled too, with
// " (not supported)" after it. Never throws.
#pragma once

#include <optional>
#include <string>

namespace cypris {

struct QuantConfig;

// The label of a parsed (so supported) quantization config.
std::string quant_label(const QuantConfig& q);

// The label of a model from its config.json text and, when it has one, its quantize_config.json
// text (AutoGPTQ's, read when config.json has no quantization_config). nullopt: not a quantized
// checkpoint (or config.json is not a JSON object).
std::optional<std::string> quant_label_from_json(const std::string& config_json,
                                                 const std::string& quantize_config_json = "");

}  // namespace cypris
