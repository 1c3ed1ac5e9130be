// Dequantization of every GGUF weight type against ggml's own: the reference files in
// testdata/gguf/refs give, per tensor, the sha256 of the whole tensor dequantized by ggml's to_float
// (little-endian f32) and its first 64 values. Matching the hash means bit-exact equality.
//
// The tensors are found with a minimal test-only GGUF locator (tests/support/mini_gguf.h); the real
// reader lives in engine/loader.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/hub/hash.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "tests/support/mini_gguf.h"

namespace cypris {
namespace {

const std::string kDir = std::string(CYPRIS_TESTDATA_DIR) + "/gguf/";
using test::GgufTensor;
using test::MiniGguf;
using test::dtype_of_ggml;

std::vector<float> dequantize_tensor(const MiniGguf& file, const GgufTensor& t) {
  const int64_t row = static_cast<int64_t>(t.ne[0]);
  int64_t rows = 1;
  for (size_t i = 1; i < t.ne.size(); ++i) rows *= static_cast<int64_t>(t.ne[i]);
  const DType dt = dtype_of_ggml(t.type);
  std::vector<float> out(static_cast<size_t>(row * rows));
  const size_t row_bytes = dtype_nbytes(dt, row);
  EXPECT_LE(file.data_start() + t.offset + row_bytes * rows, file.size());
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = file.data(t) + r * row_bytes;
    if (quant::supported(dt)) {
      quant::dequantize_row(dt, src, out.data() + r * row, row);
    } else {
      convert_to_f32(src, dt, out.data() + r * row, row);
    }
  }
  return out;
}

class DequantizeMatchesGgml : public ::testing::TestWithParam<std::string> {};

TEST_P(DequantizeMatchesGgml, WholeTensorHashAndFirstValues) {
  const std::string name = GetParam();
  std::ifstream rf(kDir + "refs/" + name + ".json");
  ASSERT_TRUE(rf) << "missing reference for " << name;
  const auto ref = nlohmann::json::parse(rf);
  const MiniGguf file(kDir + name + ".gguf");
  int checked = 0;
  for (const auto& [tname, want] : ref.at("dequantized").items()) {
    SCOPED_TRACE(name + ": " + tname + " (" + want.at("type").get<std::string>() + ")");
    const GgufTensor& t = file.tensor(tname);
    ASSERT_EQ(t.ne, want.at("ne").get<std::vector<uint64_t>>());
    const std::vector<float> got = dequantize_tensor(file, t);
    const auto first = want.at("first64").get<std::vector<double>>();
    for (size_t i = 0; i < first.size(); ++i) {
      ASSERT_EQ(got[i], static_cast<float>(first[i])) << "value " << i;
    }
    const std::string bytes(reinterpret_cast<const char*>(got.data()), got.size() * sizeof(float));
    EXPECT_EQ(hub::sha256_hex(bytes), want.at("sha256_f32le").get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

INSTANTIATE_TEST_SUITE_P(
    GgufRefs, DequantizeMatchesGgml,
    ::testing::Values("tiny-random-Q4_0", "tiny-random-Q4_1", "tiny-random-Q5_0", "tiny-random-Q5_1",
                      "tiny-random-Q8_0", "tiny-random-Q2_K", "tiny-random-Q3_K", "tiny-random-Q4_K",
                      "tiny-random-Q5_K", "tiny-random-Q6_K", "tiny-random-IQ4_NL", "tiny-random-IQ4_XS",
                      "tiny-random-Q4_K_M", "tiny-random-F16", "tiny-random-BF16", "stories260k-F32",
                      "stories260k-Q8_0", "stories260k-Q4_0"),
    [](const auto& info) {
      std::string s = info.param;
      for (char& c : s)
        if (c == '-') c = '_';
      return s;
    });

TEST(Dequantize, RejectsPartialBlocks) {
  std::vector<uint8_t> block(34, 0);
  std::vector<float> out(40);
  EXPECT_THROW(quant::dequantize_row(DType::Q8_0, block.data(), out.data(), 40), Error);
  EXPECT_THROW(quant::dequantize_row(DType::F16, block.data(), out.data(), 32), Error);
}

}  // namespace
}  // namespace cypris
