// bitsandbytes 4-bit checkpoints (tests/fixtures/quant/bnb_*, written by tests/tools/gen_bnb_fixtures.py
// as bitsandbytes' Params4bit is saved by transformers): every layer dequantizes to the float64
// reference bit for bit, stays in 4 bits (NF4G64 / FP4G64) within 1.1x the checkpoint's bytes,
// tensor-parallel slices are slices of the whole, and malformed files are errors naming the file,
// the tensor and what was expected (plus a seeded mutation fuzz: a load or a clean error).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/common/error.h"
#include "engine/loader/quant_config.h"
#include "engine/loader/quant_label.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weights.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "tests/support/error_of.h"
#include "tests/support/malformed_checkpoint.h"
#include "tests/support/quant_checkpoints.h"
#include "tests/support/safetensors_edit.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test::error_of;
using test::fnv1a64;
using test::open_checkpoint;
using test::quant_expected;

const std::string& kQuant = test::kQuantFixtures;
const std::vector<std::string> kBnb = {"bnb_nf4", "bnb_nf4_double_quant", "bnb_fp4_block128"};

std::vector<int64_t> layer_shape(const std::string& layer) { return test::fixture_layer_shape(layer, 256); }

DType kept_as(const std::string& fixture) {
  return fixture.find("fp4") != std::string::npos ? DType::FP4G64 : DType::NF4G64;
}

// The bytes the checkpoint spends on one layer's values: its packed codes and absmax (and nested
// absmax), without the fixed-size tables and quant-state JSON (1.1 KiB a layer, which would dominate
// these tiny layers and vanish in a real model's).
size_t checkpoint_bytes(const std::string& dir, const std::string& layer) {
  SafetensorsFile f(dir + "/model.safetensors");
  size_t n = 0;
  for (const auto& [name, t] : f.tensors()) {
    const bool table = name.find("quant_map") != std::string::npos || name.find("quant_state") != std::string::npos;
    if (name.rfind(layer + ".weight", 0) == 0 && !table) n += t.nbytes;
  }
  return n;
}

class BnbCheckpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(BnbCheckpoint, LayersDequantizeToTheReferenceBitForBit) {
  const auto w = open_checkpoint(kQuant + GetParam());
  const auto want = quant_expected(kQuant + GetParam())["dequant_fnv1a64"];
  ASSERT_EQ(want.size(), 7u);
  for (const auto& [layer, hash] : want.items()) {
    EXPECT_EQ(test::dequantized_fnv1a64(*w, layer, layer_shape(layer)), hash.get<std::string>()) << layer;
  }
}

// What the kernels read: 4-bit blocks within 1.1x the checkpoint's bytes, decoding to the reference.
TEST_P(BnbCheckpoint, LayersStayInFourBitsAndHoldTheReferenceValues) {
  const auto w = open_checkpoint(kQuant + GetParam());
  const auto want = quant_expected(kQuant + GetParam())["dequant_fnv1a64"];
  size_t resident = 0, stored = 0;
  for (const auto& [layer, hash] : want.items()) {
    const DType type = kept_as(GetParam());
    ASSERT_EQ(w->native_dtype(layer + ".weight"), type) << layer;
    const auto shape = layer_shape(layer);
    EXPECT_EQ(w->stored_shape(layer + ".weight"), shape) << layer;
    const HostTensor t = w->load(layer + ".weight", shape, type);
    std::vector<float> deq(static_cast<size_t>(shape[0] * shape[1]));
    quant::dequantize_row(type, t.buffer.data(), deq.data(), shape[0] * shape[1]);
    EXPECT_EQ(fnv1a64(deq.data(), deq.size()), hash.get<std::string>()) << layer;
    resident += t.buffer.size();
    stored += checkpoint_bytes(kQuant + GetParam(), layer);
  }
  EXPECT_LE(static_cast<double>(resident), 1.1 * static_cast<double>(stored));
  RecordProperty("resident_over_checkpoint", std::to_string(static_cast<double>(resident) / stored));
  // lm_head stays 16-bit (bitsandbytes never quantizes it): a plain tensor.
  EXPECT_FALSE(w->native_dtype("lm_head.weight").has_value());
}

// Rows (column-parallel) and 128-column halves (row-parallel down_proj, [128, 256]) of two ranks.
TEST_P(BnbCheckpoint, TensorParallelSlicesAreSlicesOfTheWhole) {
  const auto w = open_checkpoint(kQuant + GetParam());
  test::expect_slices_of_whole(*w, "model.layers.0.mlp.down_proj.weight", {128, 256}, kept_as(GetParam()));
  test::expect_slices_of_whole(*w, "model.layers.0.self_attn.k_proj.weight", {64, 128}, kept_as(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BnbCheckpoint, ::testing::ValuesIn(kBnb));

TEST(BnbConfig, ReadsFourBitConfigsAndRefusesEightBitByName) {
  const QuantConfig a = parse_quant_config(
      R"({"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4","bnb_4bit_use_double_quant":true})",
      "config.json");
  EXPECT_EQ(a.method, "bitsandbytes");
  EXPECT_EQ(a.checkpoint_format, "nf4");
  EXPECT_TRUE(a.double_quant);
  EXPECT_EQ(quant_label(a), "bitsandbytes nf4 double-quant");
  EXPECT_THAT(a.summary(), HasSubstr("nested"));
  std::ifstream in(kQuant + "bnb_fp4_block128/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(quant_label_from_json(ss.str()), "bitsandbytes fp4");
  auto err = [](const std::string& j) { return error_of([&] { parse_quant_config(j, "config.json"); }); };
  const QuantConfig i8 = parse_quant_config(R"({"quant_method":"bitsandbytes","load_in_8bit":true})", "config.json");
  EXPECT_EQ(i8.bits, 8);
  EXPECT_EQ(quant_label(i8), "bitsandbytes int8");
  EXPECT_THAT(i8.summary(), HasSubstr("kept in 8 bits"));
  EXPECT_THAT(err(R"({"quant_method":"bitsandbytes","load_in_8bit":true,"load_in_4bit":true})"),
              AllOf(HasSubstr("config.json"), HasSubstr("both true")));
  EXPECT_THAT(err(R"({"quant_method":"bitsandbytes","load_in_8bit":true,"llm_int8_has_fp16_weight":true})"),
              HasSubstr("llm_int8_has_fp16_weight"));
  EXPECT_THAT(err(R"({"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"int4"})"),
              AllOf(HasSubstr("bnb_4bit_quant_type 'int4'"), HasSubstr("nf4, fp4")));
  EXPECT_THAT(err(R"({"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_storage":"bfloat16"})"),
              AllOf(HasSubstr("bnb_4bit_quant_storage 'bfloat16'"), HasSubstr("uint8")));
  EXPECT_THAT(err(R"({"quant_method":"bitsandbytes"})"), HasSubstr("load_in_4bit"));
}

// LLM.int8 (load_in_8bit): int8 rows and SCB, read dequantized as bitsandbytes does, bit for bit,
// slices of the whole on two ranks.
TEST(BnbInt8Checkpoint, LayersDequantizeToTheReferenceBitForBit) {
  const std::string dir = kQuant + "bnb_int8";
  const auto w = open_checkpoint(dir);
  const auto want = quant_expected(dir)["dequant_fnv1a64"];
  ASSERT_EQ(want.size(), 7u);
  for (const auto& [layer, hash] : want.items()) {
    EXPECT_EQ(test::dequantized_fnv1a64(*w, layer, layer_shape(layer)), hash.get<std::string>()) << layer;
  }
  test::expect_slices_of_whole(*w, "model.layers.0.mlp.down_proj.weight", {128, 256}, DType::F32);
}

// Kept in 8 bits: W8G128 blocks holding the int8 values and the row scale SCB / 127 rounded to fp16.
// The blocks decode bit for bit to the generator's d16 * q (an independent float64 computation), and
// every weight is within (2^-11 + 2^-20) * SCB of bitsandbytes' own value (half an fp16 ulp of the
// scale times |q| <= 127, plus bitsandbytes' two fp32 roundings); the layers take at most 1.1x the
// checkpoint's int8 values and SCB; two ranks' slices are slices of the whole.
TEST(BnbInt8Checkpoint, LayersStayInW8BlocksWithinTheScalesFp16Rounding) {
  const std::string dir = kQuant + "bnb_int8";
  const auto w = open_checkpoint(dir);
  const auto want = quant_expected(dir)["w8_fnv1a64"];
  ASSERT_EQ(want.size(), 7u);
  SafetensorsFile f(dir + "/model.safetensors");
  double ours = 0, theirs = 0, worst = 0;
  for (const auto& [layer, hash] : want.items()) {
    const auto shape = layer_shape(layer);
    const std::optional<DType> native = w->native_dtype(layer + ".weight");
    ASSERT_TRUE(native.has_value()) << layer;
    ASSERT_EQ(*native, DType::W8G128) << layer;
    const HostTensor t = w->load(layer + ".weight", shape, *native);
    std::vector<float> deq(static_cast<size_t>(shape[0] * shape[1]));
    quant::dequantize_row(*native, t.buffer.data(), deq.data(), shape[0] * shape[1]);
    EXPECT_EQ(fnv1a64(deq), hash.get<std::string>()) << layer;
    const HostTensor exact = w->load(layer + ".weight", shape, DType::F32);  // bitsandbytes' values
    const SafetensorsTensor* scb = f.find(layer + ".SCB");
    ASSERT_NE(scb, nullptr);
    for (int64_t r = 0; r < shape[0]; ++r) {
      float s;
      std::memcpy(&s, scb->data + 4 * r, 4);
      for (int64_t c = 0; c < shape[1]; ++c) {
        const double diff = std::abs(double(deq[r * shape[1] + c]) - double(exact.buffer.as<float>()[r * shape[1] + c]));
        ASSERT_LE(diff, (0x1p-11 + 0x1p-20) * s) << layer << " [" << r << ", " << c << "]";
        worst = std::max(worst, diff / s);
      }
    }
    ours += static_cast<double>(t.buffer.size());
    theirs += static_cast<double>(f.find(layer + ".weight")->nbytes + scb->nbytes);
  }
  EXPECT_LE(ours, 1.1 * theirs);
  EXPECT_GE(ours, 0.9 * theirs);  // not a smaller, lossy form
  ::testing::Test::RecordProperty("ratio", std::to_string(ours / theirs));
  ::testing::Test::RecordProperty("max_err_over_scb", std::to_string(worst));
  test::expect_slices_of_whole(*w, "model.layers.0.mlp.down_proj.weight", {128, 256}, DType::W8G128);
}

// A row whose scale SCB / 127 would be subnormal in fp16 (coarser than 2^-11 relative) keeps its
// layer out of the W8 blocks: the layer is read dequantized, bit for bit as bitsandbytes computes it.
TEST(BnbInt8Checkpoint, ARowWithATinyAbsmaxKeepsItsLayerDequantized) {
  test::TempDir dir{"bnb_int8_tiny_row"};
  auto tensors = testing_support::copy_checkpoint(kQuant + "bnb_int8", dir.path());
  const std::string q = "model.layers.0.self_attn.q_proj";
  const float tiny = 1e-3f;  // / 127 = 7.9e-6 < 2^-14
  std::memcpy(tensors.at(q + ".SCB").bytes.data() + 4 * 5, &tiny, 4);
  testing_support::write_tensors(dir.path() / "model.safetensors", tensors);
  const auto w = open_checkpoint(dir.path());
  EXPECT_FALSE(w->native_dtype(q + ".weight").has_value());
  EXPECT_EQ(w->native_dtype("model.layers.0.self_attn.k_proj.weight"), DType::W8G128);
  const HostTensor t = w->load(q + ".weight", {128, 128}, DType::F32);
  const auto* qs = reinterpret_cast<const int8_t*>(tensors.at(q + ".weight").bytes.data());
  for (int c = 0; c < 128; ++c) {
    const volatile float prod = static_cast<float>(qs[5 * 128 + c]) * tiny;
    EXPECT_EQ(t.buffer.as<float>()[5 * 128 + c], prod * static_cast<float>(7.874015718698502e-3)) << c;
  }
  EXPECT_THAT(error_of([&] { w->load(q + ".weight", {128, 128}, DType::W8G128); }),
              AllOf(HasSubstr(q + ".weight"), HasSubstr("normal in fp16")));
}

// ---- malformed checkpoints: a copy of a fixture with one thing changed ----

using testing_support::RawTensor;

class MalformedBnb : public testing_support::MalformedCheckpoint {
 protected:
  MalformedBnb() : MalformedCheckpoint("malformed_bnb") {}
  void copy(const std::string& fixture) { MalformedCheckpoint::copy(kQuant + fixture); }
  std::string load_error(DType dtype = DType::NF4G64) { return load_layer_error(dtype); }
  void set_state(const std::string& text, const std::string& type = "nf4") {
    tensors_[q_ + ".weight.quant_state.bitsandbytes__" + type] = {"U8", {static_cast<int64_t>(text.size())}, text};
  }
};

TEST_F(MalformedBnb, TruncatedWeightNamesTheTensorAndTheShapeNeeded) {
  copy("bnb_nf4");
  RawTensor& w = tensors_[q_ + ".weight"];
  w.shape = {8000, 1};
  w.bytes.resize(8000);
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr("model.safetensors"), HasSubstr(q_ + ".weight"), HasSubstr("[8000, 1]"),
                                  HasSubstr("U8 [8192, 1]")));
}

TEST_F(MalformedBnb, AbsmaxCountThatDoesNotMatchTheBlocks) {
  copy("bnb_nf4");
  RawTensor& a = tensors_[q_ + ".weight.absmax"];
  a.shape = {200};
  a.bytes.resize(800);
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight.absmax"), HasSubstr("F32 [200]"), HasSubstr("F32 [256]"),
                                  HasSubstr("block of 64")));
  copy("bnb_nf4_double_quant");
  RawTensor& na = tensors_[q_ + ".weight.nested_absmax"];
  na.shape = {3};
  na.bytes.resize(12);
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight.nested_absmax"), HasSubstr("[3]"), HasSubstr("F32 [1]")));
  copy("bnb_nf4_double_quant");
  tensors_.erase(q_ + ".weight.nested_quant_map");
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight.nested_quant_map"), HasSubstr("not found")));
}

TEST_F(MalformedBnb, UnknownQuantTypeAndMalformedOrLyingQuantState) {
  copy("bnb_nf4");
  set_state(R"({"quant_type": "int4", "blocksize": 64, "dtype": "float16", "shape": [128, 128]})");
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight.quant_state.bitsandbytes__nf4"), HasSubstr("\"int4\""),
                                  HasSubstr("nf4, fp4")));
  copy("bnb_nf4");
  set_state(R"({"quant_type": "nf4", "blocksize": 64, "shape": [128, )");
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight.quant_state.bitsandbytes__nf4"), HasSubstr("not valid JSON")));
  copy("bnb_nf4");
  set_state(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [256, 64]})");
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr("bitsandbytes__nf4"), HasSubstr("says shape [256, 64]"),
                                  HasSubstr("needs [128, 128]")));
  copy("bnb_nf4");
  set_state(R"({"quant_type": "nf4", "blocksize": 0, "dtype": "float16", "shape": [128, 128]})");
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr("blocksize 0"), HasSubstr("positive integer")));
  copy("bnb_nf4");
  tensors_[q_ + ".weight.quant_map"].bytes[0] = 1;  // not bitsandbytes' table
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_ + ".weight.quant_map"), HasSubstr("nf4 table")));
}

TEST_F(MalformedBnb, AConfigThatContradictsTheTensorsIsAnError) {
  copy("bnb_nf4_double_quant");
  tensors_.erase(q_ + ".weight.nested_absmax");
  tensors_.erase(q_ + ".weight.nested_quant_map");
  set_state(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [128, 128]})");
  save();
  EXPECT_THAT(load_error(), AllOf(HasSubstr(q_), HasSubstr("not nested"), HasSubstr("bnb_4bit_use_double_quant")));
  copy("bnb_nf4");
  tensors_.erase(q_ + ".weight.quant_state.bitsandbytes__nf4");
  set_state(R"({"quant_type": "fp4", "blocksize": 64, "dtype": "float16", "shape": [128, 128]})", "fp4");
  save();
  EXPECT_THAT(load_error(DType::F32), AllOf(HasSubstr("the layer is fp4"), HasSubstr("bnb_4bit_quant_type is nf4")));
}

TEST_F(MalformedBnb, Int8ScbShapeAndColumnLayoutsAreErrors) {
  copy("bnb_int8");
  RawTensor& scb = tensors_[q_ + ".SCB"];
  scb.shape = {64};
  scb.bytes.resize(256);
  save();
  EXPECT_THAT(load_error(DType::F32), AllOf(HasSubstr("model.safetensors"), HasSubstr(q_ + ".SCB"), HasSubstr("[64]"),
                                            HasSubstr("F32 [128]")));
  copy("bnb_int8");
  tensors_[q_ + ".weight_format"].bytes[0] = 2;  // col_turing
  save();
  EXPECT_THAT(load_error(DType::F32), AllOf(HasSubstr(q_ + ".weight_format"), HasSubstr("not supported yet")));
  copy("bnb_int8");
  tensors_[q_ + ".weight"].shape = {128, 64};
  tensors_[q_ + ".weight"].bytes.resize(128 * 64);
  save();
  EXPECT_THAT(load_error(DType::F32), AllOf(HasSubstr(q_ + ".weight"), HasSubstr("[128, 64]"), HasSubstr("I8 [128, 128]")));
}

TEST_F(MalformedBnb, RequestedMethodAndLoadFormatMustAgree) {
  copy("bnb_nf4");
  EXPECT_THAT(error_of([&] { open_checkpoint(dir_.path(), std::string("gptq")); }),
              AllOf(HasSubstr("--quantization gptq"), HasSubstr("bitsandbytes")));
  EXPECT_NO_THROW(open_checkpoint(dir_.path(), std::string("bnb")));
  EXPECT_NO_THROW(open_checkpoint(dir_.path(), std::string("bitsandbytes")));
  LoadOptions o;
  o.load_format = "bitsandbytes";
  EXPECT_NO_THROW(open_checkpoint(dir_.path(), o));
  copy("gptq_w4_g128_v1");
  EXPECT_THAT(error_of([&] { open_checkpoint(dir_.path(), o); }),
              AllOf(HasSubstr("--load-format bitsandbytes"), HasSubstr("not a bitsandbytes checkpoint")));
}

// Seeded random mutations (shapes, bytes of any tensor including the quant-state JSON, dropped
// tensors): reading every layer in 4 bits and in fp32 loads or throws cypris::Error, nothing else.
TEST_F(MalformedBnb, MutatedCheckpointsLoadOrFailCleanly) {
  std::mt19937 rng(20261127);
  const std::vector<std::string> layers = {"self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"};
  int ok = 0, errors = 0;
  for (int iter = 0; iter < 60; ++iter) {
    copy(kBnb[rng() % kBnb.size()]);
    std::vector<std::string> names;
    for (const auto& [n, t] : tensors_)
      if (n.find("layers.0.") != std::string::npos) names.push_back(n);
    for (int m = 0; m < 1 + static_cast<int>(rng() % 2); ++m) {
      const std::string n = names[rng() % names.size()];
      RawTensor& t = tensors_[n];
      const size_t es = t.dtype == "U8" ? 1 : t.dtype == "F16" ? 2 : 4;
      switch (rng() % 4) {
        case 0:  // a shape one off, bytes to match
          if (!t.shape.empty()) t.shape[rng() % t.shape.size()] += (rng() % 2) ? 1 : -1;
          break;
        case 1:  // random bytes
          for (int k = 0; k < 4 && !t.bytes.empty(); ++k) t.bytes[rng() % t.bytes.size()] = static_cast<char>(rng());
          break;
        case 2:
          tensors_.erase(n);
          continue;
        default:  // the JSON text cut short
          if (n.find("quant_state") != std::string::npos && t.bytes.size() > 2) t.bytes.resize(rng() % t.bytes.size());
          break;
      }
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= std::max<int64_t>(d, 0);
      t.bytes.resize(static_cast<size_t>(numel) * es);
      if (n.find("quant_state") != std::string::npos) t.shape = {static_cast<int64_t>(t.bytes.size())};
    }
    save();
    for (const std::string& layer : layers) {
      const std::string name = "model.layers.0." + layer + ".weight";
      try {
        const auto w = open_checkpoint(dir_.path());
        const auto shape = layer_shape(name);
        if (auto native = w->native_dtype(name)) w->load(name, shape, *native);
        w->load(name, shape, DType::F32);
        ++ok;
      } catch (const Error&) {
        ++errors;
      }
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace cypris
