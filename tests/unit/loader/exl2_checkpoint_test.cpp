// EXL2 checkpoints (tests/fixtures/quant/exl2_mixed, written by tests/tools/gen_exl2_fixtures.py as
// exllamav2's converter packs them: 2, 3, 4, 5, 6 and 8-bit groups, act-order permutations, lm_head at
// 6 bits): every layer dequantizes to the float64 reference bit for bit, with the permutation undone;
// tensor-parallel slices are slices of the whole; -q must agree; older checkpoints without a
// quantization_config are recognised by their tensors; malformed files are errors naming the file,
// the tensor and what is expected.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/common/error.h"
#include "engine/loader/weights.h"
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
using test::error_of;
using test::fnv1a64;
using test::open_checkpoint;
using test::quant_expected;
using testing_support::RawTensor;

const std::string kExl2 = test::kQuantFixtures + "exl2_mixed";

std::vector<int64_t> layer_shape(const std::string& layer) {
  if (layer == "lm_head") return {64, 128};
  return test::fixture_layer_shape(layer, 128);
}

// Read in a plain dtype, every layer is (q - 2^(bits-1)) * fp16 scale at its input's place.
TEST(Exl2Checkpoint, LayersDequantizeToTheReferenceBitForBit) {
  const auto w = open_checkpoint(kExl2);
  const auto want = quant_expected(kExl2)["dequant_fnv1a64"];
  ASSERT_EQ(want.size(), 15u);  // 2 layers x 7 linears + lm_head
  for (const auto& [layer, hash] : want.items()) {
    EXPECT_FALSE(w->native_dtype(layer + ".weight").has_value()) << layer << ": read dequantized";
    const HostTensor t = w->load(layer + ".weight", layer_shape(layer), DType::F32);
    const float* p = t.buffer.as<float>();
    EXPECT_EQ(fnv1a64(std::vector<float>(p, p + t.view().numel())), hash.get<std::string>()) << layer;
  }
}

// The fixture has every width exllamav2 writes, so each bit reader above was exercised.
TEST(Exl2Checkpoint, FixtureHasEveryGroupWidth) {
  std::set<int> widths;
  const nlohmann::json expected = quant_expected(kExl2);
  for (const auto& [layer, groups] : expected["groups"].items()) {
    for (const auto& g : groups) widths.insert(g[0].get<int>());
  }
  EXPECT_EQ(widths, (std::set<int>{2, 3, 4, 5, 6, 8}));
}

TEST(Exl2Checkpoint, TensorParallelSlicesAreSlicesOfTheWhole) {
  const auto w = open_checkpoint(kExl2);
  for (const std::string layer : {"model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.o_proj",
                                  "model.layers.0.mlp.down_proj", "lm_head"}) {
    SCOPED_TRACE(layer);
    test::expect_slices_of_whole(*w, layer + ".weight", layer_shape(layer), DType::F32);
  }
}

TEST(Exl2Checkpoint, QuantizationFlagMustAgree) {
  EXPECT_NO_THROW(open_checkpoint(kExl2, "exl2"));
  EXPECT_THAT(error_of([&] { open_checkpoint(kExl2, "gptq"); }),
              AllOf(HasSubstr("--quantization gptq"), HasSubstr("quantized with exl2")));
  EXPECT_THAT(error_of([&] { open_checkpoint(test::kQuantFixtures + "gptq_w4_g128_v1", "exl2"); }),
              AllOf(HasSubstr("--quantization exl2"), HasSubstr("quantized with gptq")));
}

class MalformedExl2 : public testing_support::MalformedCheckpoint {
 protected:
  MalformedExl2() : MalformedCheckpoint("malformed_exl2") {}
  void SetUp() override { copy(kExl2); }
  // The error of reading layer 0's q_proj ([128, 128]; groups 8-bit x 32, 6-bit x 32, 4-bit x 64 in
  // q_weight rows 0..7, 8..13, 14..21).
  std::string load_error() { return load_layer_error(DType::F32); }
  void set_group(int index, int16_t value) {
    std::memcpy(tensors_[q_ + ".q_groups"].bytes.data() + 2 * index, &value, 2);
    save();
  }
};

// Older checkpoints have no quantization_config: the q_invperm tensors say it is EXL2.
TEST_F(MalformedExl2, CheckpointWithoutQuantizationConfigIsRecognised) {
  std::ifstream in(dir_.path() / "config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  c.erase("quantization_config");
  std::ofstream(dir_.path() / "config.json") << c.dump();
  const auto w = open_checkpoint(dir_.path(), "exl2");
  const HostTensor t = w->load(q_ + ".weight", {128, 128}, DType::F32);
  const float* p = t.buffer.as<float>();
  EXPECT_EQ(fnv1a64(std::vector<float>(p, p + 128 * 128)), quant_expected(kExl2)["dequant_fnv1a64"][q_]);
}

TEST_F(MalformedExl2, BitsOutsideTheWidthsAreNamed) {
  for (int16_t bits : {1, 7, 9}) {
    set_group(2, bits);
    EXPECT_THAT(load_error(), AllOf(HasSubstr("model.safetensors"), HasSubstr(q_ + ".q_groups"),
                                    HasSubstr(fmt::format("group 1 has {} bits", bits)), HasSubstr("2, 3, 4, 5, 6 or 8")))
        << bits;
  }
}

TEST_F(MalformedExl2, GroupsInconsistentWithTheRowsAreNamed) {
  set_group(1, 2);  // group 0 starts at q_weight row 2, not 0
  EXPECT_THAT(load_error(), AllOf(HasSubstr("model.safetensors"), HasSubstr(q_ + ".q_groups"),
                                  HasSubstr("group 0 starts at q_weight row 2"), HasSubstr("end at row 0")));
  SetUp();
  set_group(3, 9);  // group 1 (6 bits) at q_weight row 9: its 5 rows are not a whole number of 6-bit values
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_groups"), HasSubstr("group 1 (6 bits) spans q_weight rows 9..14"),
                                  HasSubstr("not a whole number")));
  SetUp();
  set_group(4, 8);  // group 2 (the last, 64 rows) at 8 bits: q_weight would need 16 rows for it, not 8
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_weight"), HasSubstr("[22, 128]"), HasSubstr("needs [30, 128]")));
  SetUp();
  set_group(0, 2);  // group 0 at 2 bits: its 8 q_weight rows hold 128 input rows, the whole layer
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_groups"), HasSubstr("hold 128 input rows but the layer has 128")));
}

TEST_F(MalformedExl2, TruncatedQweightNamesTheExpectedShape) {
  RawTensor& t = tensors_[q_ + ".q_weight"];
  t.shape = {21, 128};
  t.bytes.resize(21 * 128 * 4);
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr("model.safetensors"), HasSubstr(q_ + ".q_weight"), HasSubstr("[21, 128]"),
                                  HasSubstr("needs [22, 128]"), HasSubstr("8-bit x 32, 6-bit x 32, 4-bit x 64")));
  SetUp();
  const fs::path f = dir_.path() / "model.safetensors";
  fs::resize_file(f, fs::file_size(f) - 1000);
  EXPECT_THAT(load_error(), HasSubstr("model.safetensors"));
}

TEST_F(MalformedExl2, MisShapedScalesAndPermutations) {
  tensors_[q_ + ".q_scale"].shape = {16, 3};  // the same 48 words
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_scale"), HasSubstr("[16, 3]"), HasSubstr("needs [3, 16]")));
  SetUp();
  tensors_[q_ + ".q_scale_max"].dtype = "BF16";
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_scale_max"), HasSubstr("dtype BF16"), HasSubstr("needs F16")));
  SetUp();
  const uint16_t nan = 0x7e00;
  std::memcpy(tensors_[q_ + ".q_scale_max"].bytes.data() + 2, &nan, 2);
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_scale_max'[1]"), HasSubstr("finite")));
  SetUp();
  std::memcpy(tensors_[q_ + ".q_invperm"].bytes.data() + 4 * 7, tensors_[q_ + ".q_invperm"].bytes.data(), 4);
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_invperm'[7]"), HasSubstr("not a permutation of 0..127")));
  SetUp();
  tensors_[q_ + ".q_invperm"].shape = {64, 2};
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_invperm"), HasSubstr("needs [128]")));
  SetUp();
  tensors_.erase(q_ + ".q_scale");
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_scale'"), HasSubstr("not found")));
}

// A q_perm beside q_invperm must be its inverse.
TEST_F(MalformedExl2, QpermMustInvertQinvperm) {
  const RawTensor& inv = tensors_[q_ + ".q_invperm"];
  std::vector<int32_t> k(128), perm(128);
  std::memcpy(k.data(), inv.bytes.data(), 512);
  for (int32_t i = 0; i < 128; ++i) perm[static_cast<size_t>(k[static_cast<size_t>(i)])] = i;
  tensors_[q_ + ".q_perm"] = {"I32", {128}, std::string(reinterpret_cast<const char*>(perm.data()), 512)};
  save();
  EXPECT_EQ(load_error(), "");
  std::swap(perm[3], perm[4]);
  tensors_[q_ + ".q_perm"].bytes = std::string(reinterpret_cast<const char*>(perm.data()), 512);
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".q_perm'[3]"), HasSubstr("inverse of q_invperm")));
}

// A bounded, seeded random-mutation fuzz of the EXL2 reader: each run changes the q_* tensors'
// shapes, dtypes or words (q_groups widths and starts, q_invperm entries, scale codes, inf/NaN
// maxima) or drops one, then reads the layers as a model load does, whole and as tensor-parallel
// halves. Every outcome must be success or a cypris::Error (no crash, no other exception).
TEST(Exl2Fuzz, MutatedCheckpointsLoadOrFailCleanly) {
  std::mt19937 rng(20261127);
  test::TempDir dir("exl2_fuzz");
  const auto original = testing_support::copy_checkpoint(kExl2, dir.path());
  std::vector<std::string> names;
  for (const auto& [n, t] : original) {
    if (n.find(".q_") != std::string::npos) names.push_back(n);
  }
  int ok = 0, errors = 0;
  for (int iter = 0; iter < 150; ++iter) {
    auto tensors = original;
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) {
      const std::string name = names[rng() % names.size()];
      if (tensors.count(name) == 0) continue;
      RawTensor& t = tensors[name];
      switch (rng() % 5) {
        case 0:
          t.shape[rng() % t.shape.size()] = static_cast<int64_t>(rng() % 300);
          break;
        case 1:
          t.dtype = std::vector<std::string>{"I32", "I16", "F16", "F32"}[rng() % 4];
          break;
        case 2:  // small values where widths and row starts live, anything elsewhere
          for (int i = 0; i < 4 && !t.bytes.empty(); ++i) {
            const uint32_t v = rng() % 2 ? rng() % 40 : rng();
            const size_t at = rng() % t.bytes.size();
            std::memcpy(t.bytes.data() + at, &v, std::min<size_t>(t.dtype == "I16" ? 2 : 4, t.bytes.size() - at));
          }
          break;
        case 3:
          tensors.erase(name);
          break;
        default:
          t.shape.push_back(1);
      }
    }
    for (auto& [n, t] : tensors) {  // keep the file well formed so that the EXL2 checks run
      int64_t count = 1;
      for (int64_t d : t.shape) count *= d;
      t.bytes.resize(static_cast<size_t>(count) * (t.dtype == "I16" || t.dtype == "F16" ? 2 : 4));
    }
    testing_support::write_tensors(dir.path() / "model.safetensors", tensors);
    try {
      const auto w = open_checkpoint(dir.path());
      for (const std::string layer : {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                                      "model.layers.1.mlp.down_proj", "lm_head"}) {
        w->load(layer + ".weight", layer_shape(layer), DType::F32);
        w->load(layer + ".weight", layer_shape(layer), DType::BF16, ShardSpec::split(1, 1, 2));
      }
      ++ok;
    } catch (const Error&) {
      ++errors;
    }
  }
  std::printf("exl2 fuzz: %d loaded, %d clean errors\n", ok, errors);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace cypris
