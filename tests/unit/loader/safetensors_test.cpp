// Safetensors reading: malformed files are Errors naming the file and tensor; sharded
// checkpoints (model.safetensors.index.json) load the same model as one file; shard specs give
// each tensor-parallel rank its slice.
#include "engine/loader/safetensors.h"
#include "models/registry/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/loader/weights.h"
#include "engine/runtime/model_runner.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("loader_test") {}
};

void write_raw(const fs::path& p, uint64_t header_len, const std::string& header, const std::string& data) {
  std::ofstream out(p, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_len >> (8 * i)) & 0xff));
  out << header << data;
}

void write_st(const fs::path& p, const std::string& header, const std::string& data) {
  write_raw(p, header.size(), header, data);
}

// Expects an Error whose message contains every piece.
template <typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& pieces) {
  try {
    fn();
    ADD_FAILURE() << "expected cypris::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : pieces) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

TEST(Safetensors, ReadsAValidFile) {
  TempDir d;
  const auto p = d.path() / "a.safetensors";
  write_st(p, R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
           floats({1, 2, 3, 4}));
  SafetensorsFile f(p);
  const SafetensorsTensor* t = f.find("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(reinterpret_cast<const float*>(t->data)[3], 4.0f);
  EXPECT_EQ(f.find("__metadata__"), nullptr);
}

TEST(Safetensors, TruncatedDataNamesFileAndTensor) {
  TempDir d;
  const auto p = d.path() / "trunc.safetensors";
  write_st(
      p,
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
      floats({1, 2, 3}));  // b is cut short
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "'b'", "truncated"});
}

TEST(Safetensors, TooShortForTheHeaderLength) {
  TempDir d;
  const auto p = d.path() / "tiny.safetensors";
  std::ofstream(p, std::ios::binary) << "abc";
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "truncated"});
}

TEST(Safetensors, HeaderLengthTooBig) {
  TempDir d;
  const auto p = d.path() / "big.safetensors";
  write_raw(p, 1000, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({1}));
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "header length 1000"});
  write_raw(p, uint64_t{1} << 62, "{}", "");
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "too big"});
}

TEST(Safetensors, OffsetsOutOfRange) {
  TempDir d;
  const auto p = d.path() / "off.safetensors";
  write_st(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", floats({1, 2}));
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "'w'", "data_offsets"});
  write_st(p, R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", floats({1, 2}));
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "'w'"});
}

TEST(Safetensors, UnknownDtype) {
  TempDir d;
  const auto p = d.path() / "dt.safetensors";
  write_st(p, R"({"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,8]}})", floats({1, 2}));
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "'w'", "Q4_K"});
}

TEST(Safetensors, ShapeAndSizeMismatch) {
  TempDir d;
  const auto p = d.path() / "shape.safetensors";
  write_st(p, R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", floats({1, 2}));
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "'w'", "6 bytes", "8"});
}

// issue #20 item 1: sizes multiplied without overflow checks. [2^62] elements of F64 "need"
// 2^65 bytes, which wrapped to 0 and matched data_offsets [0, 0].
TEST(Safetensors, ShapeWhoseByteSizeWrapsIsRefused) {
  TempDir d;
  const auto p = d.path() / "wrap.safetensors";
  write_st(p, R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", floats({1}));
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "'w'", "elements"});
  write_st(p, R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
           floats({1}));
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "'w'", "dimensions"});
}

TEST(Safetensors, MalformedHeaderJson) {
  TempDir d;
  const auto p = d.path() / "json.safetensors";
  write_st(p, R"({"w":{"dtype":"F32",)", "");
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "JSON"});
  write_st(p, R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "");
  expect_error([&] { SafetensorsFile f(p); }, {p.string(), "'w'", "shape"});
}

TEST(Safetensors, NonWeightDtypeIsAnErrorOnlyWhenLoaded) {
  TempDir d;
  const std::string data = std::string(8, '\0') + floats({1, 2});
  write_st(
      d.path() / "model.safetensors",
      R"({"steps":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
      data);
  ModelConfig cfg;
  auto src = open_weight_source(model_families(), d.path(), cfg, LoadOptions{});
  EXPECT_EQ(src->load("w", {2}, DType::F32).view().as<float>()[1], 2.0f);
  expect_error([&] { src->load("steps", {1}, DType::F32); }, {"model.safetensors", "'steps'", "I64"});
  expect_error([&] { src->load("w", {3}, DType::F32); }, {"model.safetensors", "'w'", "[2]", "[3]"});
  expect_error([&] { src->load("nope", {3}, DType::F32); }, {"'nope'", "not found"});
}

TEST(Weights, ShardSpecsGiveEachRankItsSlice) {
  TempDir d;
  // w = [[0..5], [6..11], [12..17], [18..23]] as [4, 6] in BF16 (small integers are exact).
  std::string data;
  for (int i = 0; i < 24; ++i) {
    const uint16_t b = f32_to_bf16(static_cast<float>(i));
    data.append(reinterpret_cast<const char*>(&b), 2);
  }
  write_st(d.path() / "model.safetensors", R"({"w":{"dtype":"BF16","shape":[4,6],"data_offsets":[0,48]}})", data);
  ModelConfig cfg;
  auto src = open_weight_source(model_families(), d.path(), cfg, LoadOptions{});
  HostTensor rows1 = src->load("w", {4, 6}, DType::F32, ShardSpec::split(0, 1, 2));
  EXPECT_EQ(rows1.shape, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(rows1.view().as<float>()[0], 12.0f);
  HostTensor cols2 = src->load("w", {4, 6}, DType::F16, ShardSpec::split(1, 2, 3));
  EXPECT_EQ(cols2.shape, (std::vector<int64_t>{4, 2}));
  const uint16_t* c = cols2.view().as<uint16_t>();
  EXPECT_EQ(f16_to_f32(c[0]), 4.0f);
  EXPECT_EQ(f16_to_f32(c[1]), 5.0f);
  EXPECT_EQ(f16_to_f32(c[2]), 10.0f);
  EXPECT_EQ(f16_to_f32(c[7]), 23.0f);
  expect_error([&] { src->load("w", {4, 6}, DType::F32, ShardSpec::split(1, 0, 4)); }, {"'w'", "split evenly"});
}

TEST(Weights, DummyWeightsAreSeededAndShardConsistent) {
  auto a = make_dummy_weight_source(7);
  auto b = make_dummy_weight_source(8);
  HostTensor full = a->load("model.layers.0.mlp.down_proj.weight", {8, 16}, DType::F32);
  HostTensor again = a->load("model.layers.0.mlp.down_proj.weight", {8, 16}, DType::F32);
  HostTensor other = b->load("model.layers.0.mlp.down_proj.weight", {8, 16}, DType::F32);
  HostTensor half = a->load("model.layers.0.mlp.down_proj.weight", {8, 16}, DType::F32, ShardSpec::split(1, 1, 2));
  const float* f = full.view().as<float>();
  EXPECT_EQ(std::memcmp(f, again.view().as<float>(), 8 * 16 * 4), 0);
  EXPECT_NE(std::memcmp(f, other.view().as<float>(), 8 * 16 * 4), 0);
  for (int r = 0; r < 8; ++r) {
    for (int col = 0; col < 8; ++col) EXPECT_EQ(half.view().as<float>()[r * 8 + col], f[r * 16 + 8 + col]);
  }
  HostTensor norm = a->load("model.norm.weight", {4}, DType::F32);
  EXPECT_EQ(norm.view().as<float>()[2], 1.0f);
}

// Splits the llama_gqa_tied fixture into two shards with an index; logits must not change.
TEST(Checkpoint, ShardedIndexLoadsTheSameModel) {
  const fs::path src_dir = fs::path(CYPRIS_FIXTURES_DIR) / "models" / "llama_gqa_tied";
  TempDir d;
  fs::copy_file(src_dir / "config.json", d.path() / "config.json");
  SafetensorsFile whole(src_dir / "model.safetensors");
  nlohmann::json h[2], weight_map;
  std::string data[2];
  int i = 0;
  for (const auto& [name, t] : whole.tensors()) {
    const int s = i++ % 2;
    h[s][name] = {
        {"dtype", t.dtype_name}, {"shape", t.shape}, {"data_offsets", {data[s].size(), data[s].size() + t.nbytes}}};
    data[s].append(reinterpret_cast<const char*>(t.data), t.nbytes);
    weight_map[name] = s == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_st(d.path() / "model-00001-of-00002.safetensors", h[0].dump(), data[0]);
  write_st(d.path() / "model-00002-of-00002.safetensors", h[1].dump(), data[1]);
  std::ofstream(d.path() / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();

  auto run = [](const fs::path& dir) {
    ModelRunnerOptions o;
    o.model_dir = dir;
    o.load.dtype = "float32";
    o.threads = 1;
    ModelRunner r(o);
    const int32_t ids[] = {5, 9, 3, 17};
    return r.execute(make_single_sequence_batch(ids, 0, r.block_size())).data;
  };
  EXPECT_EQ(run(d.path()), run(src_dir));

  // A shard the index names but the folder lacks, and a name escaping the folder, are errors.
  fs::remove(d.path() / "model-00002-of-00002.safetensors");
  expect_error([&] { run(d.path()); }, {"model-00002-of-00002.safetensors", "missing"});
  weight_map["model.norm.weight"] = "../evil.safetensors";
  std::ofstream(d.path() / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
  expect_error([&] { run(d.path()); }, {"model.safetensors.index.json", "../evil.safetensors"});
}

// --ignore-patterns: a folder with the model and a second copy of every tensor (as repos ship an
// original/ or consolidated copy) loads only once the copy is ignored; an index shard a pattern
// skips is an error naming both.
TEST(Checkpoint, IgnorePatternsSkipFiles) {
  const fs::path src_dir = fs::path(CYPRIS_FIXTURES_DIR) / "models" / "llama_gqa_tied";
  TempDir d;
  fs::copy_file(src_dir / "config.json", d.path() / "config.json");
  fs::copy_file(src_dir / "model.safetensors", d.path() / "model-a.safetensors");
  fs::copy_file(src_dir / "model.safetensors", d.path() / "consolidated.safetensors");
  auto run = [](const fs::path& dir, std::vector<std::string> ignore) {
    ModelRunnerOptions o;
    o.model_dir = dir;
    o.load.dtype = "float32";
    o.load.ignore_patterns = std::move(ignore);
    o.threads = 1;
    ModelRunner r(o);
    const int32_t ids[] = {5, 9, 3, 17};
    return r.execute(make_single_sequence_batch(ids, 0, r.block_size())).data;
  };
  expect_error([&] { run(d.path(), {}); }, {"appears in both"});
  EXPECT_EQ(run(d.path(), {"consolidated*"}), run(src_dir, {}));
  expect_error([&] { run(d.path(), {"*.safetensors"}); }, {"--ignore-patterns"});
  std::ofstream(d.path() / "model.safetensors.index.json")
      << R"({"weight_map":{"model.norm.weight":"consolidated.safetensors"}})";
  expect_error([&] { run(d.path(), {"consolidated*"}); }, {"consolidated.safetensors", "--ignore-patterns"});
}

TEST(Checkpoint, TensorShapeDisagreeingWithConfigNamesFileAndTensor) {
  const fs::path src_dir = fs::path(CYPRIS_FIXTURES_DIR) / "models" / "llama_gqa_tied";
  TempDir d;
  fs::copy_file(src_dir / "model.safetensors", d.path() / "model.safetensors");
  std::ifstream in(src_dir / "config.json");
  auto cfg = nlohmann::json::parse(in);
  cfg["intermediate_size"] = 40;
  std::ofstream(d.path() / "config.json") << cfg.dump();
  ModelRunnerOptions o;
  o.model_dir = d.path();
  expect_error([&] { ModelRunner r(o); }, {"model.safetensors", "mlp.gate_proj.weight", "[48, 32]", "[40, 32]"});
}

TEST(Checkpoint, LoadFormats) {
  const fs::path dir = fs::path(CYPRIS_FIXTURES_DIR) / "models" / "llama_gqa_tied";
  ModelRunnerOptions o;
  o.model_dir = dir;
  o.load.load_format = "pt";  // tests/unit/loader/torch_checkpoint_test.cpp reads .bin files
  expect_error([&] { ModelRunner r(o); }, {dir.string(), "no pytorch_model*.bin"});
  o.load.load_format = "npcache";
  expect_error([&] { ModelRunner r(o); }, {"--load-format npcache", "not supported yet"});
  o.load.load_format = "gguf2";
  expect_error([&] { ModelRunner r(o); }, {"--load-format", "gguf2", "auto, safetensors, pt, gguf, dummy"});
  // dummy needs only config.json
  TempDir d;
  fs::copy_file(dir / "config.json", d.path() / "config.json");
  o.model_dir = d.path();
  o.load.load_format = "dummy";
  o.load.seed = 3;
  ModelRunner r(o);
  const int32_t ids[] = {1, 2};
  const Logits l = r.execute(make_single_sequence_batch(ids, 0, r.block_size()));
  EXPECT_EQ(l.vocab, 64);
  EXPECT_TRUE(std::isfinite(l.data[0]));
  o.load.load_format = "auto";
  expect_error([&] { ModelRunner r2(o); }, {d.path().string(), "no *.safetensors"});
}

}  // namespace
}  // namespace cypris
