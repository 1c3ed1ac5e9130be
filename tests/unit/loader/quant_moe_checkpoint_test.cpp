// GPTQ and AWQ MoE checkpoints (tests/fixtures/quant/gptq_w4_g32_mixtral, awq_w4_g64_qwen2_moe:
// Mixtral's block_sparse_moe.experts.E.w1/w2/w3 and Qwen2-MoE's mlp.experts.E.gate/up/down_proj
// plus its shared expert, packed by tests/tools/gen_quant_moe_fixtures.py as AutoGPTQ / AutoAWQ
// pack them): every expert dequantizes to the reference bit for bit, is offered in its W4 block
// type (so the model keeps it quantized and runs the grouped expert products), takes about the
// checkpoint's bytes, and a mis-shaped expert is refused naming the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/loader/safetensors.h"
#include "engine/runtime/model_runner.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "tests/support/error_of.h"
#include "tests/support/quant_checkpoints.h"
#include "tests/support/reference_fixture.h"
#include "tests/support/safetensors_edit.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string& kQuant = test::kQuantFixtures;

// [out, in] of the fixtures' layers: hidden 64, 2 KV heads of 16, experts (and Qwen2-MoE's shared
// expert and dense MLP) of width 64.
std::vector<int64_t> layer_shape(const std::string& layer) {
  if (layer.ends_with("k_proj") || layer.ends_with("v_proj")) return {32, 64};
  return {64, 64};
}

class QuantMoeCheckpoint : public ::testing::TestWithParam<std::string> {};

// Every quantized layer of the fixture; the experts among them.
TEST_P(QuantMoeCheckpoint, ExpertsDequantizeToTheReferenceBitForBit) {
  const auto w = test::open_checkpoint(kQuant + GetParam());
  const auto want = test::quant_expected(kQuant + GetParam())["dequant_fnv1a64"];
  int experts = 0;
  for (const auto& [layer, hash] : want.items()) {
    experts += layer.find(".experts.") != std::string::npos;
    const HostTensor t = w->load(layer + ".weight", layer_shape(layer), DType::F32);
    const float* p = t.buffer.as<float>();
    EXPECT_EQ(test::fnv1a64(p, static_cast<size_t>(t.view().numel())), hash.get<std::string>()) << layer;
  }
  EXPECT_GE(experts, 2 * 8 * 3) << "the fixture's experts";
}

// What the grouped expert products read: each expert in its block type (W4G32: 32-value groups,
// W4G64: AWQ's 64-value groups), decoded by the kernels' reference.
TEST_P(QuantMoeCheckpoint, ExpertsStayInW4BlocksHoldingTheReferenceValues) {
  const auto w = test::open_checkpoint(kQuant + GetParam());
  const auto want = test::quant_expected(kQuant + GetParam())["dequant_fnv1a64"];
  for (const auto& [layer, hash] : want.items()) {
    const std::optional<DType> native = w->native_dtype(layer + ".weight");
    ASSERT_TRUE(native.has_value()) << layer;
    EXPECT_EQ(*native, GetParam().find("awq") != std::string::npos ? DType::W4G64 : DType::W4G32) << layer;
    const auto shape = layer_shape(layer);
    const HostTensor t = w->load(layer + ".weight", shape, *native);
    std::vector<float> deq(static_cast<size_t>(shape[0] * shape[1]));
    quant::dequantize_row(*native, t.buffer.data(), deq.data(), shape[0] * shape[1]);
    EXPECT_EQ(test::fnv1a64(deq), hash.get<std::string>()) << layer;
  }
  // The routers stay 16-bit, read as the model's dtype.
  const std::string router = GetParam().find("mixtral") != std::string::npos
                                 ? "model.layers.0.block_sparse_moe.gate.weight"
                                 : "model.layers.0.mlp.gate.weight";
  EXPECT_FALSE(w->native_dtype(router).has_value() && dtype_is_quantized(*w->native_dtype(router)));
}

// A rank's slice of an expert (w1 rows, w2 columns with their groups) is the same bytes as that
// part of the whole expert.
TEST_P(QuantMoeCheckpoint, ExpertSlicesOfTwoRanksAreSlicesOfTheWhole) {
  const auto w = test::open_checkpoint(kQuant + GetParam());
  const bool mixtral = GetParam().find("mixtral") != std::string::npos;
  const std::string e = mixtral ? "model.layers.1.block_sparse_moe.experts.6." : "model.layers.1.mlp.experts.6.";
  for (const char* proj : {"w1", "w2", "gate_proj", "down_proj"}) {
    const std::string name = e + proj + ".weight";
    if (!w->contains(name)) continue;
    test::expect_slices_of_whole(*w, name, {64, 64}, mixtral ? DType::W4G32 : DType::W4G64);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantMoeCheckpoint,
                         ::testing::Values("gptq_w4_g32_mixtral", "awq_w4_g64_qwen2_moe"));

// The experts kept quantized take at most 1.1x the checkpoint's qweight, qzeros, scales and g_idx
// (GPTQ 4-bit, groups of 32: 20 bytes a block against 16 + 2 + 0.5 and the g_idx: 0.97x; AWQ's
// 64-value groups: one W4G64 block each, 36 bytes against 32 + 2 + 0.5).
TEST(QuantMoeCheckpointMemory, ExpertsTakeAboutTheCheckpointsBytes) {
  for (const auto& [name, bound] :
       std::vector<std::pair<std::string, double>>{{"gptq_w4_g32_mixtral", 1.1}, {"awq_w4_g64_qwen2_moe", 1.1}}) {
    const auto w = test::open_checkpoint(kQuant + name);
    SafetensorsFile f(kQuant + name + "/model.safetensors");
    double ours = 0, theirs = 0;
    const auto layers = test::quant_expected(kQuant + name)["dequant_fnv1a64"];
    ASSERT_GE(layers.size(), 2u * 8 * 3) << name;
    for (const auto& [layer, hash] : layers.items()) {
      const auto shape = layer_shape(layer);
      ours += static_cast<double>(dtype_nbytes(*w->native_dtype(layer + ".weight"), shape[0] * shape[1]));
      for (const char* part : {".qweight", ".qzeros", ".scales", ".g_idx"}) {
        if (const SafetensorsTensor* t = f.find(layer + part)) theirs += static_cast<double>(t->nbytes);
      }
    }
    EXPECT_LE(ours, bound * theirs) << name;
    EXPECT_GE(ours, 0.9 * theirs) << name;  // not a smaller, lossy form
    RecordProperty(name + "_ratio", std::to_string(ours / theirs));
  }
}

// One expert's qweight with the right bytes but the wrong shape: loading the model is an error
// naming the file, that expert's tensor and the shape it needs.
TEST(QuantMoeCheckpointErrors, MisShapedExpertQweightIsRefusedNamingTheTensor) {
  test::TempDir dir{"malformed_quant_moe"};
  auto tensors = testing_support::copy_checkpoint(kQuant + "gptq_w4_g32_mixtral", dir.path());
  const std::string bad = "model.layers.2.block_sparse_moe.experts.5.w2";
  ASSERT_EQ(tensors.at(bad + ".qweight").shape, (std::vector<int64_t>{8, 64}));
  tensors.at(bad + ".qweight").shape = {16, 32};  // the same 512 words
  testing_support::write_tensors(dir.path() / "model.safetensors", tensors);
  const std::string err = test::error_of(
      [&] { ModelRunner runner(reference_fixture::fixture_options(dir.path().string(), "float32", 4, 16)); });
  EXPECT_THAT(err, AllOf(HasSubstr("model.safetensors"), HasSubstr(bad + ".qweight"), HasSubstr("[16, 32]"),
                         HasSubstr("needs [8, 64]")));
}

}  // namespace
}  // namespace cypris
