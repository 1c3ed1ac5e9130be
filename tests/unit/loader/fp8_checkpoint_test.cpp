// FP8 checkpoints (tests/fixtures/quant/fp8_*, ct_fp8_*, written by tests/tools/gen_quant_fixtures.py
// as vLLM's Fp8Config checkpoints and compressed-tensors float-quantized ones are laid out) and
// compressed-tensors int-quantized W8A8 ones (ct_w8a8_*): every layer dequantizes to the float64
// reference bit for bit, stays in 8 bits (F8G128, or W8 blocks for int8) in memory,
// tensor-parallel slices are slices of the whole, and malformed files are errors naming the file,
// the tensor and what was expected.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/loader/model_config.h"
#include "engine/loader/quant_config.h"
#include "engine/loader/quant_label.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weights.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "models/registry/registry.h"
#include "tests/support/error_of.h"
#include "tests/support/malformed_checkpoint.h"
#include "tests/support/quant_checkpoints.h"
#include "tests/support/safetensors_edit.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string& kQuant = test::kQuantFixtures;
const std::vector<std::string> kFp8 = {"fp8_tensor_static",    "fp8_block128_dynamic",   "ct_fp8_channel_dynamic",
                                       "ct_fp8_tensor_static", "ct_w8a8_channel_dynamic", "ct_w8a8_tensor_static_asym"};

// FP8 layers stay F8G128; compressed-tensors int8 (W8A8) layers become W8 blocks.
DType kept_as(const std::string& fixture) {
  return fixture.find("w8a8") != std::string::npos ? DType::W8G128 : DType::F8G128;
}

using test::error_of;
using test::fnv1a64;
using test::open_checkpoint;
using test::quant_expected;

// [out, in] of the FP8 fixtures' layers (MLP 256).
std::vector<int64_t> layer_shape(const std::string& layer) {
  return test::fixture_layer_shape(layer, 256);
}

class Fp8Checkpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Checkpoint, LayersDequantizeToTheReferenceBitForBit) {
  const auto w = open_checkpoint(kQuant + GetParam());
  const auto want = quant_expected(kQuant + GetParam())["dequant_fnv1a64"];
  ASSERT_EQ(want.size(), 7u);
  for (const auto& [layer, hash] : want.items()) {
    EXPECT_EQ(test::dequantized_fnv1a64(*w, layer, layer_shape(layer)), hash.get<std::string>()) << layer;
  }
}

// What the kernels read: F8G128 blocks, 1.03x the checkpoint's fp8 bytes, decoding to the reference.
TEST_P(Fp8Checkpoint, LayersStayInEightBitsAndHoldTheReferenceValues) {
  const auto w = open_checkpoint(kQuant + GetParam());
  const auto want = quant_expected(kQuant + GetParam())["dequant_fnv1a64"];
  for (const auto& [layer, hash] : want.items()) {
    const DType type = kept_as(GetParam());
    ASSERT_EQ(w->native_dtype(layer + ".weight"), type) << layer;
    const auto shape = layer_shape(layer);
    const HostTensor t = w->load(layer + ".weight", shape, type);
    const size_t fp8_bytes = static_cast<size_t>(shape[0] * shape[1]);
    EXPECT_LE(t.buffer.size(), fp8_bytes * 11 / 10) << layer;
    std::vector<float> deq(fp8_bytes);
    quant::dequantize_row(type, t.buffer.data(), deq.data(), shape[0] * shape[1]);
    EXPECT_EQ(fnv1a64(deq.data(), deq.size()), hash.get<std::string>()) << layer;
  }
  // lm_head is not in FP8 (the checkpoints' ignore list): a plain tensor.
  EXPECT_FALSE(w->native_dtype("lm_head.weight").has_value());
}

// Rows (column-parallel) and 128-column halves (row-parallel down_proj, [128, 256]) of two ranks.
TEST_P(Fp8Checkpoint, TensorParallelSlicesAreSlicesOfTheWhole) {
  const auto w = open_checkpoint(kQuant + GetParam());
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  const std::vector<int64_t> full = {128, 256};
  const DType type = kept_as(GetParam());
  test::expect_slices_of_whole(*w, name, full, type);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Checkpoint, ::testing::ValuesIn(kFp8));

TEST(Fp8Config, ReadsFp8AndFloatQuantizedConfigs) {
  const QuantConfig a = parse_quant_config(R"({"quant_method":"fp8","activation_scheme":"static"})", "config.json");
  EXPECT_EQ(a.method, "fp8");
  EXPECT_EQ(a.act_scheme, "static");
  EXPECT_EQ(quant_label(a), "FP8 W8A8 static");
  const QuantConfig b = parse_quant_config(
      R"({"quant_method":"fp8","activation_scheme":"dynamic","weight_block_size":[128,128]})", "config.json");
  EXPECT_EQ(b.scale_strategy, "block");
  EXPECT_EQ(quant_label(b), "FP8 block 128x128 W8A8 dynamic");
  EXPECT_THAT(b.summary(), HasSubstr("128x128 block scales"));
  std::ifstream in(kQuant + "ct_fp8_channel_dynamic/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(quant_label_from_json(ss.str()), "compressed-tensors FP8 per-channel W8A8 dynamic");
}

TEST(Fp8Config, UnsupportedVariantsAreRefusedByName) {
  auto err = [](const std::string& j) { return error_of([&] { parse_quant_config(j, "config.json"); }); };
  EXPECT_THAT(
      err(R"({"quant_method":"fp8","activation_scheme":"sometimes"})"),
      AllOf(HasSubstr("config.json"), HasSubstr("activation_scheme 'sometimes'"), HasSubstr("dynamic, static")));
  EXPECT_THAT(err(R"({"quant_method":"fp8","weight_block_size":[128,64]})"),
              AllOf(HasSubstr("weight_block_size [128, 64]"), HasSubstr("multiple of 128")));
  EXPECT_THAT(err(R"({"quant_method":"fp8","weight_block_size":[128]})"), HasSubstr("two positive integers"));
  EXPECT_THAT(err(R"({"quant_method":"fp8","fmt":"e5m2"})"), HasSubstr("only e4m3"));
  EXPECT_THAT(
      err(R"({"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"weights":{"num_bits":8,"type":"float","strategy":"group","group_size":128}}}})"),
      AllOf(HasSubstr("strategy 'group'"), HasSubstr("tensor, channel, block")));
  EXPECT_THAT(
      err(R"({"quant_method":"compressed-tensors","format":"int-quantized","config_groups":{"g":{"weights":{"num_bits":8,"type":"int","strategy":"group","group_size":128}}}})"),
      AllOf(HasSubstr("strategy 'group'"), HasSubstr("tensor, channel")));
  EXPECT_THAT(
      err(R"({"quant_method":"compressed-tensors","format":"int-quantized","config_groups":{"g":{"weights":{"num_bits":4,"type":"int","strategy":"channel"}}}})"),
      AllOf(HasSubstr("num_bits 8"), HasSubstr("num_bits 4")));
}

// ---- malformed FP8 checkpoints: a copy of a fixture with one thing changed ----

using testing_support::RawTensor;

class MalformedFp8 : public testing_support::MalformedCheckpoint {
 protected:
  MalformedFp8() : MalformedCheckpoint("malformed_fp8") {}
  void copy(const std::string& fixture) { MalformedCheckpoint::copy(kQuant + fixture); }
  std::string load_error(DType dtype = DType::F8G128) { return load_layer_error(dtype); }
};

TEST_F(MalformedFp8, MisShapedScalesNameTheTensorAndTheShapesAllowed) {
  copy("fp8_block128_dynamic");
  RawTensor& s = tensors_[q_ + ".weight_scale_inv"];
  s.shape = {1, 1, 1};
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr("model.safetensors"), HasSubstr(q_ + ".weight_scale_inv"),
                                  HasSubstr("[1, 1, 1]"), HasSubstr("need [1, 1]")));
  copy("ct_fp8_channel_dynamic");
  tensors_[q_ + ".weight_scale"].shape = {64, 2};
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight_scale"), HasSubstr("[128] or [128, 1]")));
}

TEST_F(MalformedFp8, MissingScaleNanCodeAndBadScaleAreErrors) {
  copy("fp8_tensor_static");
  tensors_.erase(q_ + ".weight_scale");
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight_scale"), HasSubstr("not found")));
  copy("fp8_tensor_static");
  tensors_[q_ + ".weight"].bytes[5 * 128 + 7] = static_cast<char>(0x7f);
  save();
  EXPECT_THAT(load_error(DType::F32), AllOf(HasSubstr(q_ + ".weight"), HasSubstr("NaN"), HasSubstr("[5, 7]")));
  copy("fp8_tensor_static");
  const float neg = -1.0f;
  std::memcpy(tensors_[q_ + ".weight_scale"].bytes.data(), &neg, 4);
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight_scale"), HasSubstr("positive and finite")));
}

TEST_F(MalformedFp8, MisShapedWeightAndWrongScaleDtype) {
  copy("ct_fp8_tensor_static");
  tensors_[q_ + ".weight"].shape = {256, 64};
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight"), HasSubstr("[256, 64]"), HasSubstr("needs [128, 128]")));
  copy("ct_fp8_tensor_static");
  tensors_[q_ + ".weight_scale"].dtype = "I32";
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight_scale"), HasSubstr("I32"), HasSubstr("F32, F16 or BF16")));
}

TEST_F(MalformedFp8, Int8ScalesNotExactInFp16AndMisShapedZeroPoints) {
  copy("ct_w8a8_tensor_static_asym");
  const float inexact = 0.1f;  // not an fp16 value
  std::memcpy(tensors_[q_ + ".weight_scale"].bytes.data(), &inexact, 4);
  save();
  EXPECT_THAT(load_error(DType::W8G128),
              AllOf(HasSubstr(q_ + ".weight_scale"), HasSubstr("not exact in fp16"), HasSubstr("not supported yet")));
  copy("ct_w8a8_tensor_static_asym");
  tensors_[q_ + ".weight_zero_point"].shape = {1, 1};
  save();
  EXPECT_THAT(load_error(DType::W8G128), AllOf(HasSubstr(q_ + ".weight_zero_point"), HasSubstr("[1, 1]")));
  copy("ct_w8a8_tensor_static_asym");
  tensors_.erase(q_ + ".weight_zero_point");
  save();
  EXPECT_THAT(load_error(DType::W8G128), AllOf(HasSubstr(q_ + ".weight_zero_point"), HasSubstr("not found")));
}

TEST_F(MalformedFp8, RequestedMethodMustAgree) {
  copy("fp8_tensor_static");
  EXPECT_THAT(error_of([&] { open_checkpoint(dir_.path(), std::string("gptq")); }),
              AllOf(HasSubstr("--quantization gptq"), HasSubstr("fp8")));
  EXPECT_NO_THROW(open_checkpoint(dir_.path(), std::string("fp8")));
}

}  // namespace
}  // namespace cypris
