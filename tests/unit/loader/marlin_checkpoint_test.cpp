// Marlin-format GPTQ checkpoints (tests/fixtures/quant/gptq_marlin_w4_g128: the layers of the plain
// symmetric GPTQ fixture gptq_w4_g128_sym_v1 packed from the same weights by Marlin's Layer.pack,
// tests/tools/gen_quant_fixtures.py): every layer unpacks to the plain twin's values bit for bit (and
// to the float64 reference's), is kept in the same W4G128 blocks within 1.1x the B and s bytes,
// tensor-parallel slices are slices of the whole; the config variants (checkpoint_format marlin,
// is_marlin_format, quant_method marlin), -q marlin, and malformed files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/loader/quant_config.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weights.h"
#include "tests/support/error_of.h"
#include "tests/support/quant_checkpoints.h"
#include "tests/support/safetensors_edit.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test::error_of;
using test::open_checkpoint;
using test::quant_expected;

const std::string& kQuant = test::kQuantFixtures;
const std::string kMarlin = "gptq_marlin_w4_g128";
const std::string kTwin = "gptq_w4_g128_sym_v1";

// These two fixtures have an MLP of 256: down_proj [128, 256] has two groups of 128 (Marlin's
// grouped scale order), the other layers one (its single-group order).
std::vector<int64_t> layer_shape(const std::string& layer) {
  return test::fixture_layer_shape(layer, 256);
}

TEST(MarlinCheckpoint, LayersUnpackToThePlainGptqTwinBitForBit) {
  const auto marlin = open_checkpoint(kQuant + kMarlin);
  const auto plain = open_checkpoint(kQuant + kTwin);
  const auto want = quant_expected(kQuant + kMarlin)["dequant_fnv1a64"];
  ASSERT_EQ(want.size(), 7u);
  for (const auto& [layer, hash] : want.items()) {
    const auto shape = layer_shape(layer);
    EXPECT_EQ(test::dequantized_fnv1a64(*marlin, layer, shape), hash.get<std::string>()) << layer;
    const std::string name = layer + ".weight";
    const std::optional<DType> native = marlin->native_dtype(name);
    ASSERT_TRUE(native.has_value()) << layer;
    EXPECT_EQ(*native, DType::W4G128) << layer;
    ASSERT_EQ(plain->native_dtype(name), native) << layer;
    // The same blocks as the plain checkpoint's: scale, zero point 8 and every nibble.
    const HostTensor a = marlin->load(name, shape, *native);
    const HostTensor b = plain->load(name, shape, *native);
    ASSERT_EQ(a.buffer.size(), b.buffer.size()) << layer;
    EXPECT_EQ(std::memcmp(a.buffer.data(), b.buffer.data(), a.buffer.size()), 0) << layer;
  }
}

TEST(MarlinCheckpoint, LayersTakeAboutTheirBAndSBytesAndSplitOverRanks) {
  const auto w = open_checkpoint(kQuant + kMarlin);
  SafetensorsFile f(kQuant + kMarlin + "/model.safetensors");
  double ours = 0, theirs = 0;
  const auto layers = quant_expected(kQuant + kMarlin)["dequant_fnv1a64"];
  ASSERT_EQ(layers.size(), 7u);
  for (const auto& [layer, hash] : layers.items()) {
    const auto shape = layer_shape(layer);
    ours += static_cast<double>(dtype_nbytes(*w->native_dtype(layer + ".weight"), shape[0] * shape[1]));
    theirs += static_cast<double>(f.find(layer + ".B")->nbytes + f.find(layer + ".s")->nbytes);
  }
  EXPECT_LE(ours, 1.1 * theirs);
  EXPECT_GE(ours, 0.9 * theirs);
  ::testing::Test::RecordProperty("ratio", std::to_string(ours / theirs));
  test::expect_slices_of_whole(*w, "model.layers.0.mlp.down_proj.weight", {128, 256}, DType::W4G128);
  test::expect_slices_of_whole(*w, "model.layers.0.mlp.gate_proj.weight", {256, 128}, DType::W4G128);
}

// A copy of the Marlin fixture whose quantization_config is replaced by `qc` (in config.json, or in
// quantize_config.json when separate).
class MarlinConfigs : public ::testing::Test {
 protected:
  void write_config(const nlohmann::json& qc, bool separate = false) {
    tensors_ = testing_support::copy_checkpoint(kQuant + kMarlin, dir_.path());
    std::ifstream in(dir_.path() / "config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    in.close();
    if (separate) {
      c.erase("quantization_config");
      std::ofstream(dir_.path() / "quantize_config.json") << qc.dump();
    } else {
      c["quantization_config"] = qc;
    }
    std::ofstream(dir_.path() / "config.json") << c.dump();
  }
  std::string q_proj_hash(std::optional<std::string> q = std::nullopt) {
    const auto w = open_checkpoint(dir_.path().string(), std::move(q));
    return test::dequantized_fnv1a64(*w, "model.layers.0.self_attn.q_proj", {128, 128});
  }
  std::string want() {
    return quant_expected(kQuant + kMarlin)["dequant_fnv1a64"]["model.layers.0.self_attn.q_proj"].get<std::string>();
  }
  test::TempDir dir_{"marlin_configs"};
  std::map<std::string, testing_support::RawTensor> tensors_;
};

TEST_F(MarlinConfigs, AutoGptqsIsMarlinFormatAndVllmsMarlinMethodReadTheSameLayers) {
  // AutoGPTQ's quantize_config.json (no quant_method).
  write_config({{"bits", 4}, {"group_size", 128}, {"desc_act", false}, {"sym", true}, {"is_marlin_format", true}},
               true);
  EXPECT_EQ(q_proj_hash(), want());
  EXPECT_EQ(q_proj_hash("marlin"), want());
  // vLLM's marlin method.
  write_config({{"quant_method", "marlin"}, {"group_size", 128}, {"lm_head", false}});
  EXPECT_EQ(q_proj_hash(), want());
  EXPECT_THAT(read_quant_config(dir_.path())->summary(), HasSubstr("format marlin"));
}

TEST_F(MarlinConfigs, WhatMarlinsFormatCannotHoldIsRefusedNamingTheField) {
  auto err = [](const std::string& j) { return error_of([&] { parse_quant_config(j, "config.json"); }); };
  EXPECT_THAT(err(R"({"quant_method":"gptq","bits":4,"group_size":128,"sym":false,"checkpoint_format":"marlin"})"),
              AllOf(HasSubstr("config.json"), HasSubstr("Marlin"), HasSubstr("sym false")));
  EXPECT_THAT(err(R"({"quant_method":"gptq","bits":8,"group_size":128,"is_marlin_format":true})"),
              AllOf(HasSubstr("Marlin"), HasSubstr("bits 8")));
  EXPECT_THAT(err(R"({"quant_method":"gptq","bits":4,"group_size":64,"checkpoint_format":"marlin"})"),
              AllOf(HasSubstr("Marlin"), HasSubstr("group_size 64")));
  EXPECT_THAT(err(R"({"quant_method":"gptq","bits":4,"group_size":128,"desc_act":true,"checkpoint_format":"marlin"})"),
              AllOf(HasSubstr("Marlin"), HasSubstr("desc_act true")));
  EXPECT_THAT(err(R"({"quant_method":"gptq","bits":4,"group_size":128,"checkpoint_format":"exllama"})"),
              AllOf(HasSubstr("checkpoint_format 'exllama'"), HasSubstr("gptq, gptq_v2, marlin")));
  // -q marlin needs a Marlin-format checkpoint; the others' methods still agree with it.
  EXPECT_THAT(error_of([&] { open_checkpoint(kQuant + kTwin, std::string("marlin")); }),
              AllOf(HasSubstr("--quantization marlin"), HasSubstr("checkpoint_format gptq"), HasSubstr("config.json")));
  EXPECT_NO_THROW(open_checkpoint(kQuant + kMarlin, std::string("marlin")));
  EXPECT_NO_THROW(open_checkpoint(kQuant + kMarlin, std::string("gptq")));
  EXPECT_THAT(error_of([&] { open_checkpoint(kQuant + kMarlin, std::string("awq")); }),
              AllOf(HasSubstr("--quantization awq"), HasSubstr("gptq")));
}

TEST_F(MarlinConfigs, MisShapedOrMissingTensorsNameFileTensorAndShape) {
  const std::string q = "model.layers.0.self_attn.q_proj";
  auto load_error = [&] {
    return error_of([&] {
      const auto w = open_checkpoint(dir_.path().string());
      w->load(q + ".weight", {128, 128}, DType::W4G128);
    });
  };
  const nlohmann::json qc = {
      {"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"sym", true}, {"checkpoint_format", "marlin"}};
  write_config(qc);
  tensors_[q + ".B"].shape = {16, 128};  // the same 2048 words
  testing_support::write_tensors(dir_.path() / "model.safetensors", tensors_);
  EXPECT_THAT(load_error(), AllOf(HasSubstr("model.safetensors"), HasSubstr(q + ".B"), HasSubstr("[16, 128]"),
                                  HasSubstr("needs [8, 256]")));
  write_config(qc);
  tensors_[q + ".s"].dtype = "F32";
  tensors_[q + ".s"].bytes.resize(128 * 4);
  testing_support::write_tensors(dir_.path() / "model.safetensors", tensors_);
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q + ".s"), HasSubstr("F32"), HasSubstr("F16")));
  write_config(qc);
  tensors_.erase(q + ".s");
  testing_support::write_tensors(dir_.path() / "model.safetensors", tensors_);
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q + ".s"), HasSubstr("not found")));
}

}  // namespace
}  // namespace cypris
