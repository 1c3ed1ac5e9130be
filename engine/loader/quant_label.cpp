#include "engine/loader/quant_label.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/loader/quant_config.h"

namespace cypris {
namespace {

using json = nlohmann::json;

std::string group_text(int64_t g) {
  return g > 0 ? fmt::format(" g{}", g) : " per-channel";
}

std::string upper_method(const std::string& m) {
  if (m == "gptq" || m == "awq" || m == "fp8" || m == "exl2" || m == "aqlm" || m == "eetq" || m == "hqq") {
    std::string u = m;
    for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return u;
  }
  return m;
}

// For what parse_quant_config refuses: the method and whatever bit width the config names.
std::string loose_label(const json& qc) {
  const std::string method = qc.value("quant_method", std::string("gptq"));
  std::string label = upper_method(method);
  if (method == "bitsandbytes") {
    if (qc.value("load_in_4bit", false)) {
      label += " " + qc.value("bnb_4bit_quant_type", std::string("fp4"));
    } else if (qc.value("load_in_8bit", false)) {
      label += " int8";
    }
  } else if (qc.contains("bits") && qc.at("bits").is_number()) {
    label += fmt::format(" {}-bit", qc.at("bits").get<double>());
  } else if (qc.contains("format") && qc.at("format").is_string()) {
    label += " " + qc.at("format").get<std::string>();
  }
  return label + " (not supported)";
}

}  // namespace

std::string quant_label(const QuantConfig& q) {
  if (q.method == "gptq" || q.method == "awq") {
    return fmt::format("{} {}-bit{}{}", upper_method(q.method), q.bits, group_text(q.group_size),
                       q.desc_act ? " act-order" : "");
  }
  if (q.method == "exl2") {
    return q.bits_per_weight > 0 ? fmt::format("EXL2 {:g} bpw", q.bits_per_weight) : std::string("EXL2");
  }
  if (q.method == "fp8" || q.checkpoint_format == "float-quantized") {
    std::string s = q.method == "fp8" ? "FP8" : "compressed-tensors FP8";
    if (q.scale_strategy == "block") s += fmt::format(" block {}x{}", q.block_n, q.block_k);
    if (q.scale_strategy == "tensor" || q.scale_strategy == "channel") s += " per-" + q.scale_strategy;
    if (!q.act_scheme.empty()) s += " W8A8 " + q.act_scheme;
    return s;
  }
  if (q.checkpoint_format == "int-quantized") {
    return fmt::format("compressed-tensors W8A{} per-{}", q.act_scheme.empty() ? "16" : "8 " + q.act_scheme,
                       q.scale_strategy);
  }
  if (q.method == "compressed-tensors") {
    return fmt::format("compressed-tensors W{}A16{}", q.bits, group_text(q.group_size));
  }
  if (q.method == "bitsandbytes") {
    if (q.bits == 8) return "bitsandbytes int8";
    return fmt::format("bitsandbytes {}{}", q.checkpoint_format, q.double_quant ? " double-quant" : "");
  }
  return fmt::format("{} {}-bit", q.method, q.bits);
}

std::optional<std::string> quant_label_from_json(const std::string& config_json,
                                                 const std::string& quantize_config_json) {
  json qc;
  try {
    const json cfg = json::parse(config_json);
    if (!cfg.is_object()) return std::nullopt;
    if (cfg.contains("quantization_config") && cfg.at("quantization_config").is_object()) {
      qc = cfg.at("quantization_config");
    } else if (!quantize_config_json.empty()) {
      qc = json::parse(quantize_config_json);
      if (!qc.is_object()) return std::nullopt;
    } else {
      return std::nullopt;
    }
  } catch (const json::exception&) {
    return std::nullopt;
  }
  try {
    return quant_label(parse_quant_config(qc.dump(), "config.json"));
  } catch (const Error&) {
  } catch (const json::exception&) {
  }
  try {
    return loose_label(qc);
  } catch (const json::exception&) {
    return std::string("quantized (not supported)");
  }
}

}  // namespace cypris
