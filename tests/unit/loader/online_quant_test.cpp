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

namespace cypris {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kDir = std::string(CYPRIS_FIXTURES_DIR) + "/quant/online_f16";
const std::string kQuant = std::string(CYPRIS_FIXTURES_DIR) + "/quant/";

nlohmann::json expected() {
  std::ifstream in(kDir + "/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

LoadOptions options_for(const std::string& method) {
  LoadOptions o;
  if (method == "fp8") o.quantization = "fp8";
  o.load_in_8bit = method == "int8";
  o.load_in_4bit = method == "int4";
  return o;
}

std::unique_ptr<WeightSource> open(const std::string& dir, const LoadOptions& o) {
  return open_weight_source(model_families(), dir, load_model_config(model_families(), dir), o);
}

std::vector<int64_t> layer_shape(const std::string& layer) {
  if (layer.find("k_proj") != std::string::npos || layer.find("v_proj") != std::string::npos) return {64, 128};
  if (layer.find("gate_proj") != std::string::npos || layer.find("up_proj") != std::string::npos) return {256, 128};
  if (layer.find("down_proj") != std::string::npos) return {128, 256};
  return {128, 128};
}

std::string hash_of(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

using test::error_of;

// Bytes of the quantized values and their scales (and zero points) alone: what 1.1x is measured against.
double quantized_bytes(const std::string& method, int64_t out, int64_t in) {
  if (method == "fp8") return out * (in + 4.0);        // e4m3 + an fp32 scale per row
  if (method == "int8") return out * (in + 2.0);       // int8 + an fp16 scale per row
  return out * (in / 2.0 + (in / 128) * (2.0 + 0.5));  // nibbles + per 128: fp16 scale, 4-bit zero
}

class OnlineQuant : public ::testing::TestWithParam<std::string> {};

TEST_P(OnlineQuant, LayersEqualTheReferenceQuantizationBitForBit) {
  const std::string method = GetParam();
  const auto w = open(kDir, options_for(method));
  const auto want = expected()["online"][method]["dequant_fnv1a64"];
  ASSERT_EQ(want.size(), 7u);
  const DType type = method == "fp8" ? DType::F8G128 : method == "int8" ? DType::W8G128 : DType::W4G128;
  for (const auto& [layer, hash] : want.items()) {
    ASSERT_EQ(w->native_dtype(layer + ".weight"), type) << layer;
    const auto shape = layer_shape(layer);
    const HostTensor t = w->load(layer + ".weight", shape, type);
    EXPECT_LE(static_cast<double>(t.buffer.size()), 1.1 * quantized_bytes(method, shape[0], shape[1])) << layer;
    std::vector<float> deq(static_cast<size_t>(shape[0] * shape[1]));
    quant::dequantize_row(type, t.buffer.data(), deq.data(), shape[0] * shape[1]);
    EXPECT_EQ(hash_of(deq), hash.get<std::string>()) << layer << " as " << dtype_name(type);
  }
  // Embeddings, lm_head and norms stay as they are.
  EXPECT_FALSE(w->native_dtype("lm_head.weight").has_value());
  EXPECT_FALSE(w->native_dtype("model.embed_tokens.weight").has_value());
  EXPECT_FALSE(w->native_dtype("model.layers.0.input_layernorm.weight").has_value());
}

// The scales span whole rows: each rank of a row-parallel split gets the columns of the one-rank
// quantization, not a quantization of its half.
TEST_P(OnlineQuant, TensorParallelSlicesAreSlicesOfTheWhole) {
  const auto w = open(kDir, options_for(GetParam()));
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  const DType t = *w->native_dtype(name);
  const std::vector<int64_t> full = {128, 256};
  const HostTensor whole = w->load(name, full, t);
  const size_t row_bytes = dtype_nbytes(t, 256), half = row_bytes / 2;
  for (int rank = 0; rank < 2; ++rank) {
    const HostTensor rows = w->load(name, full, t, ShardSpec::split(0, rank, 2));
    EXPECT_EQ(std::memcmp(rows.buffer.data(), static_cast<const char*>(whole.buffer.data()) + rank * 64 * row_bytes,
                          64 * row_bytes),
              0);
    const HostTensor cols = w->load(name, full, t, ShardSpec::split(1, rank, 2));
    for (int64_t r = 0; r < 128; ++r) {
      ASSERT_EQ(std::memcmp(static_cast<const char*>(cols.buffer.data()) + r * half,
                            static_cast<const char*>(whole.buffer.data()) + r * row_bytes + rank * half, half),
                0)
          << "rank " << rank << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, OnlineQuant, ::testing::Values("fp8", "int8", "int4"));

TEST(OnlineQuantFlags, MeaninglessCombinationsNameTheFlags) {
  LoadOptions both;
  both.load_in_8bit = both.load_in_4bit = true;
  EXPECT_THAT(error_of([&] { open(kDir, both); }), AllOf(HasSubstr("--load-in-8bit"), HasSubstr("--load-in-4bit")));
  LoadOptions with_q = options_for("int8");
  with_q.quantization = "fp8";
  EXPECT_THAT(error_of([&] { open(kDir, with_q); }), AllOf(HasSubstr("--load-in-8bit"), HasSubstr("-q fp8")));
  // A checkpoint that is already quantized loads as it is.
  EXPECT_THAT(error_of([&] { open(kQuant + "gptq_w4_g128_v1", options_for("int4")); }),
              AllOf(HasSubstr("--load-in-4bit"), HasSubstr("already quantized"), HasSubstr("gptq")));
  // -q fp8 on a GPTQ checkpoint is a mismatch, not an online quantization.
  EXPECT_THAT(error_of([&] { open(kQuant + "gptq_w4_g128_v1", options_for("fp8")); }),
              AllOf(HasSubstr("--quantization fp8"), HasSubstr("gptq")));
}

}  // namespace
}  // namespace cypris
