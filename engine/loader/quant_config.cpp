#include "engine/loader/quant_config.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"

namespace cypris {
namespace {

using json = nlohmann::json;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  CYPRIS_CHECK(in.good(), "{}: cannot open the file", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    CYPRIS_FAIL("{}: not valid JSON ({})", source, e.what());
  }
}

int64_t int_field(const json& j, const char* key, const std::string& source, int64_t def) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  const json& v = j.at(key);
  CYPRIS_CHECK(v.is_number_integer(), "{}: quantization_config.{} must be an integer, got {}", source, key, v.dump());
  return v.get<int64_t>();
}

bool bool_field(const json& j, const char* key, const std::string& source, bool def) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  const json& v = j.at(key);
  CYPRIS_CHECK(v.is_boolean(), "{}: quantization_config.{} must be true or false, got {}", source, key, v.dump());
  return v.get<bool>();
}

std::string string_field(const json& j, const char* key, const std::string& source, const std::string& def) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  const json& v = j.at(key);
  CYPRIS_CHECK(v.is_string(), "{}: quantization_config.{} must be a string, got {}", source, key, v.dump());
  return v.get<std::string>();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void check_group_size(const QuantConfig& q) {
  CYPRIS_CHECK(q.group_size == -1 || (q.group_size > 0 && q.group_size % 32 == 0),
               "{}: quantization_config.group_size {} is not supported; allowed: -1 (one group per row) or a "
               "multiple of 32 (32, 64, 128, ...)",
               q.source, q.group_size);
}

// compressed-tensors float-quantized: FP8 e4m3 weights with tensor, channel or block scales, and
// optionally FP8 activations (static input_scale or dynamic per token). Cypris keeps the weights in
// FP8 and runs the activations unquantized (fp32 on the CPU, the model's 16-bit type on CUDA).
QuantConfig float_quantized(QuantConfig q, const json& grp, const json& w, const std::string& source) {
  const std::string key = "quantization_config.config_groups";
  q.bits = static_cast<int>(int_field(w, "num_bits", source, 0));
  const std::string type = string_field(w, "type", source, "float");
  CYPRIS_CHECK(q.bits == 8 && type == "float",
               "{}: {} weights: float-quantized needs num_bits 8 and type float (FP8 e4m3), got num_bits {} type {}",
               source, key, q.bits, type);
  q.scale_strategy = string_field(w, "strategy", source, "");
  CYPRIS_CHECK(q.scale_strategy == "tensor" || q.scale_strategy == "channel" || q.scale_strategy == "block",
               "{}: {} weights.strategy '{}': allowed for FP8 weights: tensor, channel, block", source, key,
               q.scale_strategy);
  if (q.scale_strategy == "block") {
    const json b = w.value("block_structure", json());
    CYPRIS_CHECK(b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer() &&
                     b[0].get<int64_t>() > 0 && b[1].get<int64_t>() > 0 && b[1].get<int64_t>() % 128 == 0,
                 "{}: {} weights.block_structure must be [rows, columns] with columns a multiple of 128, got {}",
                 source, key, b.dump());
    q.block_n = b[0].get<int64_t>();
    q.block_k = b[1].get<int64_t>();
  }
  CYPRIS_CHECK(w.value("actorder", json()).is_null(), "{}: {} weights.actorder {}: not supported yet", source, key,
               w.at("actorder").dump());
  CYPRIS_CHECK(bool_field(w, "symmetric", source, true),
               "{}: {} weights.symmetric false: FP8 weights with zero points are not supported yet", source, key);
  if (grp.contains("input_activations") && !grp.at("input_activations").is_null()) {
    const json& a = grp.at("input_activations");
    CYPRIS_CHECK(a.is_object(), "{}: {} input_activations must be an object or null", source, key);
    const std::string atype = string_field(a, "type", source, "float");
    CYPRIS_CHECK(atype == "float" && int_field(a, "num_bits", source, 8) == 8,
                 "{}: {} input_activations: only FP8 activations (type float, num_bits 8) go with FP8 weights", source,
                 key);
    q.act_scheme = bool_field(a, "dynamic", source, false) ? "dynamic" : "static";
  }
  q.group_size = -1;
  q.zero_point_plus_one = false;
  return q;
}

// compressed-tensors int-quantized (W8A8): int8 weights with tensor or channel scales (and zero
// points when asymmetric), int8 activations (dynamic per token, or a static input_scale). Cypris
// repacks the weights into W8 blocks and quantizes the activations to int8 itself, per 128 (or 32)
// values rather than per token (finer), with integer dots on the CPU.
QuantConfig int_quantized(QuantConfig q, const json& grp, const json& w, const std::string& source) {
  const std::string key = "quantization_config.config_groups";
  q.bits = static_cast<int>(int_field(w, "num_bits", source, 0));
  const std::string type = string_field(w, "type", source, "int");
  CYPRIS_CHECK(q.bits == 8 && type == "int",
               "{}: {} weights: int-quantized needs num_bits 8 and type int (int8), got num_bits {} type {}", source,
               key, q.bits, type);
  q.scale_strategy = string_field(w, "strategy", source, "");
  CYPRIS_CHECK(q.scale_strategy == "tensor" || q.scale_strategy == "channel",
               "{}: {} weights.strategy '{}': allowed for int8 weights: tensor, channel (group: not supported yet)",
               source, key, q.scale_strategy);
  CYPRIS_CHECK(w.value("actorder", json()).is_null(), "{}: {} weights.actorder {}: not supported yet", source, key,
               w.at("actorder").dump());
  q.sym = bool_field(w, "symmetric", source, true);
  if (grp.contains("input_activations") && !grp.at("input_activations").is_null()) {
    const json& a = grp.at("input_activations");
    CYPRIS_CHECK(a.is_object(), "{}: {} input_activations must be an object or null", source, key);
    CYPRIS_CHECK(string_field(a, "type", source, "int") == "int" && int_field(a, "num_bits", source, 8) == 8,
                 "{}: {} input_activations: only int8 activations go with int8 weights", source, key);
    q.act_scheme = bool_field(a, "dynamic", source, false) ? "dynamic" : "static";
  }
  q.group_size = -1;
  q.zero_point_plus_one = false;
  return q;
}

// bitsandbytes (transformers' BitsAndBytesConfig): pre-quantized 4-bit NF4/FP4 checkpoints, whose
// absmax may be double-quantized (nested). The block size and shapes are in each layer's
// quant_state (engine/loader/bnb_weights.cpp); 8-bit (LLM.int8) checkpoints' int8 rows are kept in W8 blocks.
QuantConfig bitsandbytes(QuantConfig q, const json& j, const std::string& source) {
  const bool in4 = bool_field(j, "load_in_4bit", source, bool_field(j, "_load_in_4bit", source, false));
  const bool in8 = bool_field(j, "load_in_8bit", source, bool_field(j, "_load_in_8bit", source, false));
  CYPRIS_CHECK(!(in4 && in8),
               "{}: quantization_config: load_in_4bit and load_in_8bit are both true; a bitsandbytes checkpoint is one "
               "or the other",
               source);
  CYPRIS_CHECK(in4 || in8, "{}: quantization_config: a bitsandbytes checkpoint needs load_in_4bit or load_in_8bit true",
               source);
  if (in8) {  // LLM.int8: int8 rows with an fp32 absmax per row (SCB); the outlier threshold is a run-time choice
    CYPRIS_CHECK(!bool_field(j, "llm_int8_has_fp16_weight", source, false),
                 "{}: quantization_config.llm_int8_has_fp16_weight true: such a checkpoint keeps 16-bit weights; "
                 "load it without the quantization_config",
                 source);
    q.bits = 8;
    q.checkpoint_format = "int8";
    q.group_size = -1;
    q.zero_point_plus_one = false;
    return q;
  }
  q.bits = 4;
  q.checkpoint_format = lower(string_field(j, "bnb_4bit_quant_type", source, "fp4"));
  CYPRIS_CHECK(q.checkpoint_format == "nf4" || q.checkpoint_format == "fp4",
               "{}: quantization_config.bnb_4bit_quant_type '{}': allowed: nf4, fp4", source, q.checkpoint_format);
  q.double_quant = bool_field(j, "bnb_4bit_use_double_quant", source, false);
  const std::string storage = lower(string_field(j, "bnb_4bit_quant_storage", source, "uint8"));
  CYPRIS_CHECK(storage == "uint8",
               "{}: quantization_config.bnb_4bit_quant_storage '{}': bitsandbytes checkpoints with other than uint8 "
               "storage are not supported yet",
               source, storage);
  q.group_size = 64;  // bitsandbytes' default; each layer's quant_state says its own
  q.sym = true;
  q.zero_point_plus_one = false;
  return q;
}

QuantConfig from_json(const json& j, const std::string& source) {
  CYPRIS_CHECK(j.is_object(), "{}: quantization_config must be an object, got {}", source, j.dump());
  QuantConfig q;
  q.source = source;
  // AutoGPTQ's quantize_config.json has no quant_method: it is GPTQ.
  q.method = lower(string_field(j, "quant_method", source, "gptq"));
  // vLLM's "marlin" method: a GPTQ checkpoint in Marlin's format (B and s tensors).
  const bool marlin_method = q.method == "marlin";
  if (marlin_method) q.method = "gptq";
  if (q.method == "gptq") {
    q.bits = static_cast<int>(int_field(j, "bits", source, 4));
    q.group_size = int_field(j, "group_size", source, -1);
    q.desc_act = bool_field(j, "desc_act", source, false);
    q.sym = bool_field(j, "sym", source, true);
    q.checkpoint_format = string_field(j, "checkpoint_format", source, "gptq");
    if (marlin_method || bool_field(j, "is_marlin_format", source, false)) q.checkpoint_format = "marlin";
    CYPRIS_CHECK(q.checkpoint_format == "gptq" || q.checkpoint_format == "gptq_v2" || q.checkpoint_format == "marlin",
                 "{}: quantization_config.checkpoint_format '{}' is not a GPTQ format; allowed: gptq, gptq_v2, marlin",
                 source, q.checkpoint_format);
    if (q.checkpoint_format == "marlin") {
      // Marlin's format is 4-bit, symmetric (zero 8), in input order, groups of 128 or whole rows.
      CYPRIS_CHECK(q.bits == 4 && q.sym && !q.desc_act && (q.group_size == 128 || q.group_size == -1),
                   "{}: quantization_config: a Marlin-format GPTQ checkpoint must be bits 4, sym true, desc_act "
                   "false, group_size 128 or -1 (Marlin's format), got bits {}, sym {}, desc_act {}, group_size {}",
                   source, q.bits, q.sym, q.desc_act, q.group_size);
    }
    q.zero_point_plus_one = q.checkpoint_format == "gptq";
    CYPRIS_CHECK(q.bits == 2 || q.bits == 3 || q.bits == 4 || q.bits == 8,
                 "{}: quantization_config.bits {} is not a GPTQ bit width; allowed: 2, 3, 4, 8", source, q.bits);
    check_group_size(q);
  } else if (q.method == "awq") {
    q.bits = static_cast<int>(int_field(j, "bits", source, int_field(j, "w_bit", source, 4)));
    q.group_size = int_field(j, "group_size", source, int_field(j, "q_group_size", source, 128));
    q.checkpoint_format = lower(string_field(j, "version", source, "gemm"));
    q.sym = !bool_field(j, "zero_point", source, true);
    q.zero_point_plus_one = false;
    CYPRIS_CHECK(q.checkpoint_format == "gemm",
                 "{}: quantization_config.version '{}': only AWQ's GEMM layout is supported (version gemm); gemv and "
                 "others are not supported yet",
                 source, q.checkpoint_format);
    CYPRIS_CHECK(q.bits == 4, "{}: quantization_config.bits {}: AWQ checkpoints are 4-bit; allowed: 4", source, q.bits);
    CYPRIS_CHECK(!q.sym, "{}: quantization_config.zero_point false: AWQ without zero points is not supported yet",
                 source);
    CYPRIS_CHECK(q.group_size > 0, "{}: quantization_config.group_size {}: AWQ needs a positive group size", source,
                 q.group_size);
    check_group_size(q);
  } else if (q.method == "fp8") {
    // vLLM's Fp8Config: e4m3 weights with per-tensor (or per-channel) weight_scale, or 128x128
    // block scales (weight_scale_inv) when weight_block_size is given.
    q.bits = 8;
    q.checkpoint_format = "fp8";
    q.act_scheme = string_field(j, "activation_scheme", source, "dynamic");
    CYPRIS_CHECK(q.act_scheme == "dynamic" || q.act_scheme == "static",
                 "{}: quantization_config.activation_scheme '{}': allowed: dynamic, static", source, q.act_scheme);
    const std::string fmt_name = lower(string_field(j, "fmt", source, "e4m3"));
    CYPRIS_CHECK(fmt_name == "e4m3", "{}: quantization_config.fmt '{}': only e4m3 FP8 weights are supported", source,
                 fmt_name);
    if (j.contains("weight_block_size") && !j.at("weight_block_size").is_null()) {
      const json& b = j.at("weight_block_size");
      CYPRIS_CHECK(b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer() &&
                       b[0].get<int64_t>() > 0 && b[1].get<int64_t>() > 0,
                   "{}: quantization_config.weight_block_size must be two positive integers [rows, columns], got {}",
                   source, b.dump());
      q.scale_strategy = "block";
      q.block_n = b[0].get<int64_t>();
      q.block_k = b[1].get<int64_t>();
      CYPRIS_CHECK(q.block_k % 128 == 0,
                   "{}: quantization_config.weight_block_size [{}, {}]: the column block must be a multiple of 128 "
                   "(128x128 as DeepSeek-V3 and Qwen3-FP8 ship); other block shapes are not supported yet",
                   source, q.block_n, q.block_k);
    }
  } else if (q.method == "compressed-tensors") {
    // llm-compressor's pack-quantized W4A16 / W8A16: one config group of integer weights, no
    // activation quantization.
    q.checkpoint_format = string_field(j, "format", source, "");
    CYPRIS_CHECK(q.checkpoint_format == "pack-quantized" || q.checkpoint_format == "float-quantized" ||
                     q.checkpoint_format == "int-quantized",
                 "{}: quantization_config.format '{}': compressed-tensors {} checkpoints are not supported yet; "
                 "Cypris loads pack-quantized (W4A16, W8A16), int-quantized (W8A8 int8) and float-quantized (FP8)",
                 source, q.checkpoint_format, q.checkpoint_format);
    CYPRIS_CHECK(j.contains("config_groups") && j.at("config_groups").is_object() && j.at("config_groups").size() == 1,
                 "{}: quantization_config.config_groups: Cypris loads compressed-tensors checkpoints with one config "
                 "group (several: not supported yet)",
                 source);
    const json& grp = j.at("config_groups").begin().value();
    CYPRIS_CHECK(grp.is_object() && grp.contains("weights") && grp.at("weights").is_object(),
                 "{}: quantization_config.config_groups.{}.weights must be an object", source,
                 j.at("config_groups").begin().key());
    const json& w = grp.at("weights");
    if (q.checkpoint_format == "float-quantized") return float_quantized(q, grp, w, source);
    if (q.checkpoint_format == "int-quantized") return int_quantized(q, grp, w, source);
    CYPRIS_CHECK(!grp.contains("input_activations") || grp.at("input_activations").is_null(),
                 "{}: quantization_config: quantized input activations (W8A8) are not supported yet; Cypris loads "
                 "weight-only pack-quantized checkpoints",
                 source);
    q.bits = static_cast<int>(int_field(w, "num_bits", source, 0));
    CYPRIS_CHECK(q.bits == 4 || q.bits == 8, "{}: quantization_config weights.num_bits {}: allowed: 4, 8", source,
                 q.bits);
    CYPRIS_CHECK(string_field(w, "type", source, "int") == "int",
                 "{}: quantization_config weights.type '{}': only int weights are supported", source,
                 string_field(w, "type", source, "int"));
    q.sym = bool_field(w, "symmetric", source, true);
    const std::string strategy = string_field(w, "strategy", source, "");
    CYPRIS_CHECK(strategy == "group" || strategy == "channel",
                 "{}: quantization_config weights.strategy '{}': allowed: group, channel", source, strategy);
    q.group_size = strategy == "channel" ? -1 : int_field(w, "group_size", source, 0);
    CYPRIS_CHECK(w.value("actorder", json()).is_null(),
                 "{}: quantization_config weights.actorder {}: not supported yet", source, w.at("actorder").dump());
    q.zero_point_plus_one = false;
    check_group_size(q);
  } else if (q.method == "exl2") {
    // exllamav2's config states only the averages; the widths are per group in each layer's q_groups.
    if (j.contains("bits") && !j.at("bits").is_null()) {
      CYPRIS_CHECK(j.at("bits").is_number() && j.at("bits").get<double>() >= 2 && j.at("bits").get<double>() <= 8,
                   "{}: quantization_config.bits must be a number of bits per weight from 2 to 8, got {}", source,
                   j.at("bits").dump());
      q.bits_per_weight = j.at("bits").get<double>();
    }
    q.head_bits = static_cast<int>(int_field(j, "head_bits", source, 0));
    q.bits = static_cast<int>(q.bits_per_weight + 0.5);
    q.group_size = -1;
    q.zero_point_plus_one = false;
    q.checkpoint_format = "exl2";
  } else if (q.method == "bitsandbytes") {
    return bitsandbytes(q, j, source);
  } else {
    CYPRIS_FAIL(
        "{}: quantization_config.quant_method '{}' is not supported yet; Cypris loads gptq, awq, fp8, exl2, "
        "bitsandbytes (4-bit) and compressed-tensors (pack-quantized, float-quantized) checkpoints (and GGUF files)",
        source, q.method);
  }
  return q;
}

}  // namespace

std::string QuantConfig::summary() const {
  if (method == "fp8" || checkpoint_format == "float-quantized") {
    const std::string scales = scale_strategy == "block"     ? fmt::format("{}x{} block", block_n, block_k)
                               : scale_strategy.empty()      ? "per-tensor or per-channel"
                               : scale_strategy == "tensor" ? "per-tensor"
                                                             : "per-channel";
    return fmt::format("{}{} e4m3 weights, {} scales, {}", method, method == "fp8" ? "" : " float-quantized", scales,
                       act_scheme.empty() ? "16-bit activations"
                                          : act_scheme + " activation scales (activations run unquantized)");
  }
  if (method == "exl2") {
    return fmt::format("exl2 {} bits per weight, head {} bits (mixed 2-8 bits per group)",
                       bits_per_weight > 0 ? fmt::format("{:g}", bits_per_weight) : std::string("(not stated)"),
                       head_bits > 0 ? std::to_string(head_bits) : std::string("(not stated)"));
  }
  if (method == "bitsandbytes" && bits == 8) {
    return "bitsandbytes int8 (LLM.int8), one absmax per row; kept in 8 bits (W8 blocks), activations quantized "
           "to 8 bits per 128 values (no outlier decomposition: llm_int8_threshold unused)";
  }
  if (method == "bitsandbytes") {
    return fmt::format("bitsandbytes {} 4-bit{}, 16-bit activations", checkpoint_format,
                       double_quant ? ", nested (double-quantized) absmax" : "");
  }
  if (method == "awq") {
    return fmt::format("awq {}-bit, group size {}, zero points, version {}", bits, group_size, checkpoint_format);
  }
  if (checkpoint_format == "int-quantized") {
    return fmt::format("compressed-tensors int-quantized int8 weights, per-{} scales, {}, {}", scale_strategy,
                       sym ? "symmetric" : "asymmetric",
                       act_scheme.empty() ? "16-bit activations"
                                          : act_scheme + " int8 activations (quantized by Cypris per 128 values)");
  }
  if (method == "compressed-tensors") {
    return fmt::format("compressed-tensors {} W{}A16, group size {}, {}", checkpoint_format, bits, group_size,
                       sym ? "symmetric" : "asymmetric");
  }
  return fmt::format("{} {}-bit, group size {}, desc_act {}, sym {}, format {}", method, bits, group_size, desc_act,
                     sym, checkpoint_format);
}

QuantConfig parse_quant_config(const std::string& json_text, const std::string& source) {
  return from_json(parse(json_text, source), source);
}

std::optional<QuantConfig> read_quant_config(const std::filesystem::path& dir) {
  const auto cfg_path = dir / "config.json";
  if (std::filesystem::is_regular_file(cfg_path)) {
    const json j = parse(read_file(cfg_path), cfg_path.string());
    if (j.is_object() && j.contains("quantization_config") && !j.at("quantization_config").is_null()) {
      return from_json(j.at("quantization_config"), cfg_path.string());
    }
  }
  const auto qpath = dir / "quantize_config.json";
  if (std::filesystem::is_regular_file(qpath))
    return from_json(parse(read_file(qpath), qpath.string()), qpath.string());
  return std::nullopt;
}

std::optional<QuantConfig> resolve_quantization(const std::optional<QuantConfig>& checkpoint,
                                                const std::optional<std::string>& requested, const std::string& model) {
  if (!requested) return checkpoint;
  const std::string r = lower(*requested);
  CYPRIS_CHECK(checkpoint.has_value(),
               "--quantization {}: {} is not a quantized checkpoint (no quantization_config in config.json and no "
               "quantize_config.json); leave -q out to load it as it is",
               r, model);
  // gptq_marlin is Aphrodite's faster kernel choice for the same GPTQ checkpoints; here the same
  // CPU/CUDA kernels serve both.
  const bool marlin = checkpoint->checkpoint_format == "marlin";
  const bool same = r == checkpoint->method || (r == "gptq_marlin" && checkpoint->method == "gptq") ||
                    (r == "marlin" && marlin) || (r == "bnb" && checkpoint->method == "bitsandbytes");
  CYPRIS_CHECK(!(r == "marlin" && checkpoint->method == "gptq" && !marlin),
               "--quantization marlin: the checkpoint is GPTQ in checkpoint_format {} ({}), not Marlin's format "
               "(checkpoint_format marlin); pass -q gptq (or gptq_marlin) or leave -q out",
               checkpoint->checkpoint_format, checkpoint->source);
  CYPRIS_CHECK(same,
               "--quantization {}: the checkpoint is quantized with {} ({}: quantization_config.quant_method); pass "
               "-q {} or leave -q out",
               r, checkpoint->method, checkpoint->source, checkpoint->method);
  return checkpoint;
}

}  // namespace cypris
