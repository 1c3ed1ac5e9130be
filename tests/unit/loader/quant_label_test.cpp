// The short quantization label the Models panel and the load log show ("GPTQ 4-bit g128"), from a
// model's config.json (and AutoGPTQ's quantize_config.json); methods Cypris cannot load are
// labelled too and say so; nothing throws.
#include "engine/loader/quant_label.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace cypris {
namespace {

const std::string kQuant = std::string(CYPRIS_FIXTURES_DIR) + "/quant/";

std::string file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::string> label_of_fixture(const std::string& name) {
  const std::string qc = kQuant + name + "/quantize_config.json";
  return quant_label_from_json(file(kQuant + name + "/config.json"), std::ifstream(qc).good() ? file(qc) : "");
}

TEST(QuantLabel, NamesMethodBitsAndGroup) {
  EXPECT_EQ(label_of_fixture("gptq_w4_g128_v1"), "GPTQ 4-bit g128");
  EXPECT_EQ(label_of_fixture("gptq_w8_g32_sym_v2"), "GPTQ 8-bit g32");  // from quantize_config.json
  EXPECT_EQ(label_of_fixture("gptq_w2_rowgroup_v1"), "GPTQ 2-bit per-channel");
  EXPECT_EQ(label_of_fixture("gptq_w3_g32_v1"), "GPTQ 3-bit g32");
  EXPECT_EQ(label_of_fixture("gptq_w4_g64_act_order"), "GPTQ 4-bit g64 act-order");
  EXPECT_EQ(label_of_fixture("awq_w4_g64"), "AWQ 4-bit g64");
  EXPECT_EQ(label_of_fixture("ct_w4a16_g128_sym"), "compressed-tensors W4A16 g128");
  EXPECT_EQ(label_of_fixture("ct_w8a16_channel_asym"), "compressed-tensors W8A16 per-channel");
  EXPECT_EQ(label_of_fixture("exl2_mixed"), "EXL2 4.21 bpw");
  EXPECT_EQ(quant_label_from_json(R"({"quantization_config":{"quant_method":"exl2"}})"), "EXL2");
}

TEST(QuantLabel, PlainAndUnreadableConfigsHaveNone) {
  EXPECT_EQ(quant_label_from_json(R"({"model_type":"llama"})"), std::nullopt);
  EXPECT_EQ(quant_label_from_json("not json"), std::nullopt);
  EXPECT_EQ(quant_label_from_json("[1, 2]"), std::nullopt);
}

TEST(QuantLabel, UnsupportedMethodsAreLabelledAsSuch) {
  EXPECT_EQ(
      quant_label_from_json(
          R"({"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4"}})"),
      "bitsandbytes nf4");
  EXPECT_EQ(quant_label_from_json(R"({"quantization_config":{"quant_method":"bitsandbytes","load_in_8bit":true}})"),
            "bitsandbytes int8");
  EXPECT_EQ(
      quant_label_from_json(
          R"({"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4","bnb_4bit_quant_storage":"bfloat16"}})"),
      "bitsandbytes nf4 (not supported)");
  EXPECT_EQ(quant_label_from_json(R"({"quantization_config":{"quant_method":"gptq","bits":5}})"),
            "GPTQ 5-bit (not supported)");
  EXPECT_EQ(quant_label_from_json(R"({"quantization_config":{"quant_method":7}})"), "quantized (not supported)");
}

}  // namespace
}  // namespace cypris
