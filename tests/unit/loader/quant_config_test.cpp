// Reading a checkpoint's quantization_config (config.json or quantize_config.json), choosing the
// method, -q agreeing with it, and the refusals by name of what is not implemented.
#include "engine/loader/quant_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "engine/common/error.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kQuant = std::string(CYPRIS_FIXTURES_DIR) + "/quant/";

using test::error_of;

std::string parse_error(const std::string& json) {
  return error_of([&] { parse_quant_config(json, "config.json"); });
}

TEST(QuantConfig, ReadsGptqFromConfigJson) {
  const auto q = read_quant_config(kQuant + "gptq_w4_g128_v1");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->method, "gptq");
  EXPECT_EQ(q->bits, 4);
  EXPECT_EQ(q->group_size, 128);
  EXPECT_FALSE(q->sym);
  EXPECT_TRUE(q->zero_point_plus_one);  // checkpoint_format gptq: zeros stored minus one
  EXPECT_THAT(q->summary(), AllOf(HasSubstr("gptq 4-bit"), HasSubstr("group size 128")));
}

TEST(QuantConfig, ReadsQuantizeConfigJsonBesideConfig) {
  const auto q = read_quant_config(kQuant + "gptq_w8_g32_sym_v2");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->method, "gptq");  // AutoGPTQ's file has no quant_method
  EXPECT_EQ(q->bits, 8);
  EXPECT_EQ(q->group_size, 32);
  EXPECT_TRUE(q->sym);
  EXPECT_FALSE(q->zero_point_plus_one);  // gptq_v2
  EXPECT_NE(q->source.find("quantize_config.json"), std::string::npos);
}

TEST(QuantConfig, ReadsAwq) {
  const auto q = read_quant_config(kQuant + "awq_w4_g64");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->method, "awq");
  EXPECT_EQ(q->bits, 4);
  EXPECT_EQ(q->group_size, 64);
  EXPECT_FALSE(q->zero_point_plus_one);
  // AutoAWQ's own spelling of the fields.
  const QuantConfig old = parse_quant_config(
      R"({"quant_method":"awq","w_bit":4,"q_group_size":128,"zero_point":true,"version":"GEMM"})", "c");
  EXPECT_EQ(old.group_size, 128);
  EXPECT_EQ(old.checkpoint_format, "gemm");
}

TEST(QuantConfig, ReadsCompressedTensorsPackQuantized) {
  const auto q = read_quant_config(kQuant + "ct_w8a16_channel_asym");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->method, "compressed-tensors");
  EXPECT_EQ(q->bits, 8);
  EXPECT_EQ(q->group_size, -1);  // channel strategy: one group per row
  EXPECT_FALSE(q->sym);
  EXPECT_EQ(read_quant_config(kQuant + "ct_w4a16_g128_sym")->group_size, 128);
}

TEST(QuantConfig, PlainCheckpointHasNone) {
  EXPECT_FALSE(read_quant_config(std::string(CYPRIS_FIXTURES_DIR) + "/models/llama_linear").has_value());
}

TEST(QuantConfig, UnimplementedMethodsAndVariantsAreRefusedByName) {
  EXPECT_THAT(parse_error(R"({"quant_method":"compressed-tensors","format":"marlin-24"})"),
              AllOf(HasSubstr("config.json"), HasSubstr("marlin-24"), HasSubstr("not supported yet")));
  EXPECT_THAT(parse_error(R"({"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_storage":"bfloat16"})"),
              AllOf(HasSubstr("bnb_4bit_quant_storage 'bfloat16'"), HasSubstr("not supported yet")));
  EXPECT_THAT(
      parse_error(
          R"({"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"g":{"weights":{"num_bits":4,"strategy":"group","group_size":128},"input_activations":{"num_bits":8}}}})"),
      AllOf(HasSubstr("input activations"), HasSubstr("not supported yet")));
  EXPECT_THAT(
      parse_error(
          R"({"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"g":{"weights":{"num_bits":4,"strategy":"tensor"}}}})"),
      HasSubstr("strategy 'tensor'"));
  EXPECT_THAT(parse_error(R"({"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_storage":"float32"})"),
              HasSubstr("bitsandbytes"));
  EXPECT_THAT(parse_error(R"({"quant_method":"exl2","bits":9.5})"),
              AllOf(HasSubstr("quantization_config.bits"), HasSubstr("from 2 to 8")));
  EXPECT_THAT(parse_error(R"({"quant_method":"exl2","bits":"4.0"})"), HasSubstr("quantization_config.bits"));
  EXPECT_THAT(parse_error(R"({"quant_method":"gptq","bits":5,"group_size":128})"),
              AllOf(HasSubstr("bits 5"), HasSubstr("allowed: 2, 3, 4, 8")));
  // Marlin's format holds 4-bit symmetric layers only (marlin_checkpoint_test.cpp reads them).
  EXPECT_THAT(parse_error(R"({"quant_method":"gptq","bits":4,"group_size":128,"sym":false,"checkpoint_format":"marlin"})"),
              AllOf(HasSubstr("Marlin"), HasSubstr("sym false")));
  EXPECT_THAT(parse_error(R"({"quant_method":"gptq","bits":3,"group_size":128,"is_marlin_format":true})"),
              HasSubstr("Marlin"));
  EXPECT_THAT(parse_error(R"({"quant_method":"gptq","bits":4,"group_size":16})"),
              AllOf(HasSubstr("group_size 16"), HasSubstr("multiple of 32")));
  EXPECT_THAT(parse_error(R"({"quant_method":"awq","bits":4,"group_size":128,"version":"gemv"})"),
              AllOf(HasSubstr("version 'gemv'"), HasSubstr("gemm")));
  EXPECT_THAT(parse_error(R"({"quant_method":"awq","bits":4,"group_size":128,"zero_point":false})"),
              HasSubstr("zero_point false"));
  EXPECT_THAT(parse_error(R"({"quant_method":"gptq","bits":"4"})"), AllOf(HasSubstr("bits"), HasSubstr("integer")));
  EXPECT_THAT(parse_error(R"([1, 2])"), HasSubstr("must be an object"));
  EXPECT_THAT(parse_error(R"({"quant_method":)"), HasSubstr("not valid JSON"));
}

TEST(QuantConfig, RequestedMethodMustAgreeWithTheCheckpoint) {
  const auto gptq = read_quant_config(kQuant + "gptq_w4_g128_v1");
  EXPECT_EQ(resolve_quantization(gptq, std::nullopt, "m")->method, "gptq");  // chosen automatically
  EXPECT_EQ(resolve_quantization(gptq, "gptq", "m")->method, "gptq");
  EXPECT_EQ(resolve_quantization(gptq, "gptq_marlin", "m")->method, "gptq");
  // A mismatch names both methods.
  EXPECT_THAT(error_of([&] { resolve_quantization(gptq, "awq", "m"); }),
              AllOf(HasSubstr("--quantization awq"), HasSubstr("quantized with gptq"), HasSubstr("config.json")));
  // -q on a plain checkpoint.
  EXPECT_THAT(error_of([&] { resolve_quantization(std::nullopt, "gptq", "/models/plain"); }),
              AllOf(HasSubstr("--quantization gptq"), HasSubstr("/models/plain"), HasSubstr("not a quantized")));
  EXPECT_FALSE(resolve_quantization(std::nullopt, std::nullopt, "m").has_value());
}

TEST(QuantConfig, MalformedQuantizeConfigJsonNamesTheFile) {
  test::TempDir d("quant_config");
  std::ofstream(d.path() / "quantize_config.json") << R"({"bits": 4, "group_size": "x"})";
  EXPECT_THAT(error_of([&] { read_quant_config(d.path()); }),
              AllOf(HasSubstr("quantize_config.json"), HasSubstr("group_size")));
}

}  // namespace
}  // namespace cypris
