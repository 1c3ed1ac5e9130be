// Online quantization of a 16-bit checkpoint (-q fp8, --load-in-8bit, --load-in-4bit;
// tests/fixtures/quant/online_f16): every linear layer, in the block type the kernels read, decodes
// to the float64 reference quantization of tests/tools/gen_quant_fixtures.py bit for bit, takes at
// most 1.1x the bytes of its quantized values and scales, splits over tensor-parallel ranks as
// slices of the whole, and the flags that make no sense together are errors naming them.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/loader/model_config.h"
#include "engine/loader/weights.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "models/registry/registry.h"
#include "tests/support/error_of.h"
#include "tests/support/quant_checkpoints.h"

namespace cypris {
namespace {

using test::error_of;
using test::fnv1a64;
using test::kQuantFixtures;
using test::open_checkpoint;
using test::quant_expected;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string& kQuant = test::kQuantFixtures;
const std::string kDir = kQuantFixtures + "online_f16";

LoadOptions options_for(const std::string& method) {
  LoadOptions o;
  if (method == "fp8") o.quantization = "fp8";
  o.load_in_8bit = method == "int8";
  o.load_in_4bit = method == "int4";
  return o;
}

// Bytes of the quantized values and their scales (and zero points) alone: what 1.1x is measured against.
double quantized_bytes(const std::string& method, int64_t out, int64_t in) {
  if (method == "fp8") return out * (in + 4.0);        // e4m3 + an fp32 scale per row
  if (method == "int8") return out * (in + 2.0);       // int8 + an fp16 scale per row
  return out * (in / 2.0 + (in / 128) * (2.0 + 0.5));  // nibbles + per 128: fp16 scale, 4-bit zero
}

class OnlineQuant : public ::testing::TestWithParam<std::string> {};

TEST_P(OnlineQuant, LayersEqualTheReferenceQuantizationBitForBit) {
  const std::string method = GetParam();
  const auto w = open_checkpoint(kDir, options_for(method));
  const auto want = quant_expected(kDir)["online"][method]["dequant_fnv1a64"];
  ASSERT_EQ(want.size(), 7u);
  const DType type = method == "fp8" ? DType::F8G128 : method == "int8" ? DType::W8G128 : DType::W4G128;
  for (const auto& [layer, hash] : want.items()) {
    ASSERT_EQ(w->native_dtype(layer + ".weight"), type) << layer;
    const auto shape = test::fixture_layer_shape(layer, 256);
    const HostTensor t = w->load(layer + ".weight", shape, type);
    EXPECT_LE(static_cast<double>(t.buffer.size()), 1.1 * quantized_bytes(method, shape[0], shape[1])) << layer;
    std::vector<float> deq(static_cast<size_t>(shape[0] * shape[1]));
    quant::dequantize_row(type, t.buffer.data(), deq.data(), shape[0] * shape[1]);
    EXPECT_EQ(fnv1a64(deq), hash.get<std::string>()) << layer << " as " << dtype_name(type);
  }
  // Embeddings, lm_head and norms stay as they are.
  EXPECT_FALSE(w->native_dtype("lm_head.weight").has_value());
  EXPECT_FALSE(w->native_dtype("model.embed_tokens.weight").has_value());
  EXPECT_FALSE(w->native_dtype("model.layers.0.input_layernorm.weight").has_value());
}

// The scales span whole rows: each rank of a row-parallel split gets the columns of the one-rank
// quantization, not a quantization of its half.
TEST_P(OnlineQuant, TensorParallelSlicesAreSlicesOfTheWhole) {
  const auto w = open_checkpoint(kDir, options_for(GetParam()));
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  const DType t = *w->native_dtype(name);
  const std::vector<int64_t> full = {128, 256};
  test::expect_slices_of_whole(*w, name, full, t);
}

INSTANTIATE_TEST_SUITE_P(Methods, OnlineQuant, ::testing::Values("fp8", "int8", "int4"));

TEST(OnlineQuantFlags, MeaninglessCombinationsNameTheFlags) {
  LoadOptions both;
  both.load_in_8bit = both.load_in_4bit = true;
  EXPECT_THAT(error_of([&] { open_checkpoint(kDir, both); }),
              AllOf(HasSubstr("--load-in-8bit"), HasSubstr("--load-in-4bit")));
  LoadOptions with_q = options_for("int8");
  with_q.quantization = "fp8";
  EXPECT_THAT(error_of([&] { open_checkpoint(kDir, with_q); }),
              AllOf(HasSubstr("--load-in-8bit"), HasSubstr("-q fp8")));
  // A checkpoint that is already quantized loads as it is.
  EXPECT_THAT(error_of([&] { open_checkpoint(kQuant + "gptq_w4_g128_v1", options_for("int4")); }),
              AllOf(HasSubstr("--load-in-4bit"), HasSubstr("already quantized"), HasSubstr("gptq")));
  // -q fp8 on a GPTQ checkpoint is a mismatch, not an online quantization.
  EXPECT_THAT(error_of([&] { open_checkpoint(kQuant + "gptq_w4_g128_v1", options_for("fp8")); }),
              AllOf(HasSubstr("--quantization fp8"), HasSubstr("gptq")));
}

}  // namespace
}  // namespace cypris
