// GGUF reading against llama.cpp's files in testdata/gguf: every file opens, tensor types and
// shapes are those llama.cpp reports (refs/*.json), the config equals stories260k's own
// config.json, the weight source gives back the HF tensors of model.safetensors (q/k permutation
// undone), quantized tensors come through byte for byte, and split files join. Malformed files are
// Errors naming the file and field (gguf_malformed_test.cpp, gguf_fuzz_test.cpp).
#include "engine/loader/gguf.h"
#include "models/registry/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/loader/gguf_model.h"
#include "engine/loader/model_config.h"
#include "engine/loader/weights.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

const fs::path kDir = fs::path(CYPRIS_TESTDATA_DIR) / "gguf";

json read_ref(const std::string& name) {
  std::ifstream in(kDir / "refs" / (name + ".json"));
  return json::parse(in);
}

std::vector<std::string> gguf_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDir))
    if (e.path().extension() == ".gguf") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("gguf_test") {}
};

TEST(Gguf, EveryTestdataFileOpensWithLlamaCppsTypesAndShapes) {
  const auto names = gguf_names();
  ASSERT_EQ(names.size(), 18u);
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    GgufModel m(kDir / (name + ".gguf"));
    EXPECT_EQ(m.main().version(), 3u);
    EXPECT_EQ(m.get_string("general.architecture").value_or(""), "llama");
    const json ref = read_ref(name);
    ASSERT_TRUE(ref.contains("dequantized"));
    for (const auto& [tname, info] : ref["dequantized"].items()) {
      const GgufTensorInfo* t = m.tensor(tname);
      ASSERT_NE(t, nullptr) << tname;
      EXPECT_EQ(std::string(ggml_traits(t->type).name), upper(info["type"].get<std::string>())) << tname;
      EXPECT_EQ(t->ne, info["ne"].get<std::vector<int64_t>>()) << tname;
      EXPECT_EQ(t->offset % m.main().alignment(), 0u);
    }
  }
}

TEST(Gguf, ConfigOfStories260kEqualsItsConfigJson) {
  const fs::path hf_dir = fs::path(CYPRIS_TESTDATA_DIR) / "models" / "stories260k";
  const ModelConfig hf = load_model_config(model_families(), hf_dir);
  for (const char* name : {"stories260k-F32", "stories260k-Q8_0", "stories260k-Q4_0"}) {
    SCOPED_TRACE(name);
    const ModelConfig g = load_model_config(model_families(), kDir / (std::string(name) + ".gguf"));
    EXPECT_EQ(g.architectures, hf.architectures);
    EXPECT_EQ(g.hidden_size, hf.hidden_size);
    EXPECT_EQ(g.intermediate_size, hf.intermediate_size);
    EXPECT_EQ(g.num_hidden_layers, hf.num_hidden_layers);
    EXPECT_EQ(g.num_attention_heads, hf.num_attention_heads);
    EXPECT_EQ(g.num_key_value_heads, hf.num_key_value_heads);
    EXPECT_EQ(g.head_dim, hf.head_dim);
    EXPECT_EQ(g.vocab_size, hf.vocab_size);
    EXPECT_EQ(g.max_position_embeddings, hf.max_position_embeddings);
    EXPECT_FLOAT_EQ(static_cast<float>(g.rms_norm_eps), static_cast<float>(hf.rms_norm_eps));  // stored as f32
    EXPECT_DOUBLE_EQ(g.rope_theta, hf.rope_theta);
    EXPECT_EQ(g.tie_word_embeddings, true);  // no output.weight in the file
    EXPECT_EQ(g.bos_token_id, hf.bos_token_id);
    EXPECT_EQ(g.eos_token_ids, hf.eos_token_ids);
    EXPECT_EQ(g.rope_scaling.type, "default");
  }
}

// What a Gemma file does not say follows llama.cpp's rules: the query scale is 1/sqrt(head_dim)
// except for the 27B sizes (Gemma 2: 46 layers, Gemma 3: 62), where it is 1/sqrt(hidden / heads);
// Gemma 3 has a global layer every sixth and slides the others with rope base 10000.
TEST(Gguf, GemmaConfigFollowsLlamaCppRules) {
  struct Case {
    const char* arch;
    int layers, hidden, heads, head_dim;
    double scalar;
  };
  for (const Case& c : {Case{"gemma2", 42, 3584, 16, 256, 256}, Case{"gemma2", 46, 4608, 32, 128, 144},
                        Case{"gemma3", 48, 3840, 16, 256, 256}, Case{"gemma3", 62, 5376, 32, 128, 168}}) {
    SCOPED_TRACE(std::string(c.arch) + " " + std::to_string(c.layers) + " layers");
    const std::string a = c.arch;
    test::GgufWriter w;
    w.kv_str("general.architecture", a);
    w.kv_u32(a + ".context_length", 8192);
    w.kv_u32(a + ".embedding_length", static_cast<uint32_t>(c.hidden));
    w.kv_u32(a + ".block_count", static_cast<uint32_t>(c.layers));
    w.kv_u32(a + ".feed_forward_length", 14336);
    w.kv_u32(a + ".attention.head_count", static_cast<uint32_t>(c.heads));
    w.kv_u32(a + ".attention.head_count_kv", 8);
    w.kv_u32(a + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
    w.kv_u32(a + ".attention.sliding_window", 4096);
    w.kv_u32(a + ".vocab_size", 256000);
    const std::string bytes = w.bytes();
    GgufModel m(std::make_unique<GgufFile>("gemma.gguf", bytes.data(), bytes.size()));
    const ModelConfig cfg = gguf_model_config(model_families(), m);
    ASSERT_TRUE(cfg.query_pre_attn_scalar.has_value());
    EXPECT_DOUBLE_EQ(*cfg.query_pre_attn_scalar, c.scalar);
    EXPECT_TRUE(cfg.tie_word_embeddings);
    ASSERT_EQ(cfg.layer_sliding_window.size(), static_cast<size_t>(c.layers));
    for (int i = 0; i < c.layers; ++i) {
      const bool global = a == "gemma2" ? i % 2 == 1 : i % 6 == 5;
      EXPECT_EQ(cfg.layer_sliding_window[i], global ? 0 : 4096) << "layer " << i;
    }
    if (a == "gemma3") {
      ASSERT_TRUE(cfg.rope_local_base_freq.has_value());
      EXPECT_DOUBLE_EQ(*cfg.rope_local_base_freq, 10000.0);
    }
  }
}

TEST(Gguf, ConfigOfTinyRandomMatchesTheReadme) {
  for (const auto& name : gguf_names()) {
    if (name.rfind("tiny-random", 0) != 0) continue;
    SCOPED_TRACE(name);
    const ModelConfig c = load_model_config(model_families(), kDir / (name + ".gguf"));
    EXPECT_EQ(c.hidden_size, 256);
    EXPECT_EQ(c.intermediate_size, 512);
    EXPECT_EQ(c.num_hidden_layers, 2);
    EXPECT_EQ(c.num_attention_heads, 4);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.torch_dtype, name.ends_with("BF16") ? "bfloat16" : "float16");
  }
}

TEST(Gguf, QuantMixCountsTensorsByType) {
  GgufModel q4km(kDir / "tiny-random-Q4_K_M.gguf");
  const std::string mix = gguf_type_mix(q4km);
  EXPECT_THAT(mix, HasSubstr("Q4_K: "));
  EXPECT_THAT(mix, HasSubstr("Q6_K: "));
  EXPECT_THAT(mix, HasSubstr("F32: 5"));  // 2 x 2 layer norms + output_norm
  GgufModel q8(kDir / "tiny-random-Q8_0.gguf");
  // 2 layers x 7 matrices + embedding + output = 16 Q8_0 tensors.
  EXPECT_EQ(gguf_type_mix(q8), "Q8_0: 16 tensors, F32: 5");
}

TEST(Gguf, WeightsOfStories260kF32EqualTheSafetensorsCheckpoint) {
  // llama.cpp's converter permuted q/k rows; reading them back must give HF's layout exactly.
  const fs::path hf_dir = fs::path(CYPRIS_TESTDATA_DIR) / "models" / "stories260k";
  const ModelConfig cfg = load_model_config(model_families(), hf_dir);
  LoadOptions lo;
  auto hf = open_weight_source(model_families(), hf_dir, cfg, lo);
  auto gg = open_weight_source(model_families(), kDir / "stories260k-F32.gguf", cfg, lo);
  const int64_t h = cfg.hidden_size, kvd = cfg.num_key_value_heads * cfg.head_dim, I = cfg.intermediate_size;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"model.embed_tokens.weight", {cfg.vocab_size, h}},
      {"model.norm.weight", {h}},
  };
  auto expect_same = [&](const std::string& name, const std::vector<int64_t>& shape, const ShardSpec& shard) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(gg->contains(name));
    HostTensor a = hf->load(name, shape, DType::F32, shard);
    HostTensor b = gg->load(name, shape, DType::F32, shard);
    ASSERT_EQ(a.shape, b.shape);
    EXPECT_EQ(std::memcmp(a.buffer.data(), b.buffer.data(), a.buffer.size()), 0);
  };
  for (const auto& [name, shape] : tensors) expect_same(name, shape, {});
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect_same(p + "self_attn.q_proj.weight", {h, h}, {});
    expect_same(p + "self_attn.k_proj.weight", {kvd, h}, {});
    expect_same(p + "self_attn.v_proj.weight", {kvd, h}, {});
    expect_same(p + "self_attn.o_proj.weight", {h, h}, {});
    expect_same(p + "mlp.gate_proj.weight", {I, h}, {});
    expect_same(p + "mlp.up_proj.weight", {I, h}, {});
    expect_same(p + "mlp.down_proj.weight", {h, I}, {});
    expect_same(p + "input_layernorm.weight", {h}, {});
    expect_same(p + "post_attention_layernorm.weight", {h}, {});
    // Tensor-parallel slices of permuted and plain tensors.
    for (int r = 0; r < 2; ++r) {
      expect_same(p + "self_attn.q_proj.weight", {h, h}, ShardSpec::split(0, r, 2));
      expect_same(p + "self_attn.k_proj.weight", {kvd, h}, ShardSpec::split(0, r, 2));
      expect_same(p + "self_attn.o_proj.weight", {h, h}, ShardSpec::split(1, r, 2));
    }
  }
  EXPECT_FALSE(gg->contains("lm_head.weight"));
  EXPECT_FALSE(gg->native_dtype("model.embed_tokens.weight").has_value() &&
               dtype_is_quantized(*gg->native_dtype("model.embed_tokens.weight")));
}

TEST(Gguf, HalfPrecisionTensorsConvertToLlamaCppsValues) {
  // refs: ggml's own to_float of the first 64 values (ffn_down is not permuted).
  for (const char* name : {"tiny-random-F16", "tiny-random-BF16"}) {
    SCOPED_TRACE(name);
    const fs::path path = kDir / (std::string(name) + ".gguf");
    const ModelConfig cfg = load_model_config(model_families(), path);
    auto w = open_weight_source(model_families(), path, cfg, LoadOptions{});
    const json ref = read_ref(name)["dequantized"];
    const std::pair<const char*, const char*> names[] = {{"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"},
                                                         {"token_embd.weight", "model.embed_tokens.weight"},
                                                         {"output.weight", "lm_head.weight"}};
    for (const auto& [gname, hname] : names) {
      const auto ne = ref[gname]["ne"].get<std::vector<int64_t>>();
      HostTensor t = w->load(hname, {ne[1], ne[0]}, DType::F32);
      const auto first = ref[gname]["first64"].get<std::vector<float>>();
      for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(t.buffer.as<float>()[i], first[i]) << gname << " " << i;
      // And to bf16/f16 the way every other weight converts (round to nearest even).
      HostTensor h16 = w->load(hname, {ne[1], ne[0]}, DType::F16);
      EXPECT_EQ(f16_to_f32(h16.buffer.as<uint16_t>()[0]), f16_to_f32(f32_to_f16(first[0])));
    }
  }
}

TEST(Gguf, QuantizedTensorsComeThroughBlockForBlock) {
  const fs::path path = kDir / "tiny-random-Q8_0.gguf";
  const ModelConfig cfg = load_model_config(model_families(), path);
  auto w = open_weight_source(model_families(), path, cfg, LoadOptions{});
  GgufModel m(path);
  const std::string name = "model.layers.0.mlp.down_proj.weight";  // [256, 512], Q8_0
  ASSERT_EQ(w->native_dtype(name), DType::Q8_0);
  const GgufTensorInfo* t = m.tensor("blk.0.ffn_down.weight");
  HostTensor all = w->load(name, {256, 512}, DType::Q8_0);
  ASSERT_EQ(all.buffer.size(), t->nbytes);
  EXPECT_EQ(std::memcmp(all.buffer.data(), t->data, t->nbytes), 0);
  // Rows split: each rank its rows' blocks. Row length split: whole blocks of each row.
  const size_t row_bytes = 512 / 32 * 34;
  for (int r = 0; r < 2; ++r) {
    HostTensor rows = w->load(name, {256, 512}, DType::Q8_0, ShardSpec::split(0, r, 2));
    EXPECT_EQ(std::memcmp(rows.buffer.data(), t->data + r * 128 * row_bytes, 128 * row_bytes), 0);
    HostTensor cols = w->load(name, {256, 512}, DType::Q8_0, ShardSpec::split(1, r, 2));
    for (int row = 0; row < 256; ++row) {
      ASSERT_EQ(std::memcmp(cols.buffer.as<uint8_t>() + row * row_bytes / 2,
                            t->data + row * row_bytes + r * row_bytes / 2, row_bytes / 2),
                0);
    }
  }
  // 512 / 32 = 16 blocks per row do not split 32 ways into whole blocks.
  try {
    w->load(name, {256, 512}, DType::Q8_0, ShardSpec::split(1, 0, 32));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a whole number of Q8_0 blocks"));
    EXPECT_THAT(e.what(), HasSubstr("blk.0.ffn_down.weight"));
  }
  // A quantized tensor is not silently converted into another quantized type.
  EXPECT_THROW(w->load(name, {256, 512}, DType::Q4_0), Error);
  EXPECT_THROW(w->load(name, {512, 256}, DType::Q8_0), Error);  // wrong shape
}

TEST(Gguf, TensorNamesMapToHuggingFaceNames) {
  EXPECT_EQ(gguf_tensor_name("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(gguf_tensor_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(gguf_tensor_name("model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.12.self_attn.o_proj.weight"), "blk.12.attn_output.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.0.post_attention_layernorm.weight"), "blk.0.ffn_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.mlp.gate_proj.weight"), "blk.3.ffn_gate.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.self_attn.q_proj.bias"), "blk.3.attn_q.bias");
  EXPECT_FALSE(gguf_tensor_name("model.layers.x.mlp.gate_proj.weight").has_value());
  EXPECT_FALSE(gguf_tensor_name("model.layers.3.mlp.nothing").has_value());
  EXPECT_EQ(gguf_tensor_name("model.layers.2.self_attn.k_norm.weight"), "blk.2.attn_k_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.2.mlp.gate.weight"), "blk.2.ffn_gate_inp.weight");
  // Experts: the layer's merged tensor and the expert's index, or the older per-expert tensor.
  const auto up = gguf_tensor_ref("model.layers.4.mlp.experts.17.up_proj.weight");
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->name, "blk.4.ffn_up_exps.weight");
  EXPECT_EQ(up->expert, 17);
  EXPECT_EQ(up->legacy_name, "blk.4.ffn_up.17.weight");
  const auto w2 = gguf_tensor_ref("model.layers.0.block_sparse_moe.experts.3.w2.weight");
  ASSERT_TRUE(w2.has_value());
  EXPECT_EQ(w2->name, "blk.0.ffn_down_exps.weight");
  EXPECT_EQ(w2->expert, 3);
  EXPECT_FALSE(gguf_tensor_ref("model.layers.0.mlp.experts.x.up_proj.weight").has_value());
  EXPECT_FALSE(gguf_tensor_ref("model.layers.0.mlp.experts.1234567.up_proj.weight").has_value());
  EXPECT_FALSE(gguf_tensor_ref("model.layers.0.mlp.experts.1.w1.weight").has_value());
}

// A small model in the writer's hands: metadata of every kind, split across files.
test::GgufWriter tiny_writer() {
  test::GgufWriter w;
  w.kv_str("general.architecture", "llama");
  w.kv_u32("llama.context_length", 128);
  w.kv_u32("llama.embedding_length", 32);
  w.kv_u32("llama.block_count", 1);
  w.kv_u32("llama.feed_forward_length", 64);
  w.kv_u32("llama.attention.head_count", 2);
  w.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  return w;
}

TEST(Gguf, MetadataOfEveryTypeIncludingNestedArrays) {
  test::GgufWriter w;
  using W = test::GgufWriter;
  std::string b;
  b = std::string(1, '\xff');
  w.kv_raw("u8", 0, b);
  w.kv_raw("i8", 1, b);
  b = std::string("\xfe\xff", 2);
  w.kv_raw("u16", 2, b);
  w.kv_raw("i16", 3, b);
  w.kv_u32("u32", 4000000000u);
  w.kv_i32("i32", -7);
  w.kv_f32("f32", 0.5f);
  w.kv_bool("bool", true);
  w.kv_str("string", "héllo");
  b.clear();
  W::u64(b, 18000000000000000000ull);
  w.kv_raw("u64", 10, b);
  b.clear();
  W::u64(b, static_cast<uint64_t>(-5));
  w.kv_raw("i64", 11, b);
  double d = -2.25;
  b.assign(reinterpret_cast<const char*>(&d), 8);
  w.kv_raw("f64", 12, b);
  // [[1, 2], [3]] as an array of arrays of i32.
  b.clear();
  W::u32(b, 9);
  W::u64(b, 2);
  for (std::vector<int32_t> inner : {std::vector<int32_t>{1, 2}, std::vector<int32_t>{3}}) {
    W::u32(b, 5);
    W::u64(b, inner.size());
    b.append(reinterpret_cast<const char*>(inner.data()), inner.size() * 4);
  }
  w.kv_raw("nested", 9, b);
  w.kv_strs("strings", {"a", "", "ccc"});
  const std::string bytes = w.bytes();
  GgufModel m(std::make_unique<GgufFile>("mem.gguf", bytes.data(), bytes.size()));
  EXPECT_EQ(m.get_int("u8"), 255);
  EXPECT_EQ(m.get_int("i8"), -1);
  EXPECT_EQ(m.get_int("u16"), 65534);
  EXPECT_EQ(m.get_int("i16"), -2);
  EXPECT_EQ(m.get_int("u32"), 4000000000ll);
  EXPECT_EQ(m.get_int("i32"), -7);
  EXPECT_EQ(m.get_double("f32"), 0.5);
  EXPECT_EQ(m.get_bool("bool"), true);
  EXPECT_EQ(m.get_string("string"), "héllo");
  EXPECT_THROW(m.get_int("u64"), Error);  // above INT64_MAX
  EXPECT_EQ(m.get_int("i64"), -5);
  EXPECT_EQ(m.get_double("f64"), -2.25);
  const GgufValue* nested = m.get_array("nested", GgufType::Array);
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->size(), 2u);
  EXPECT_EQ(nested->array_at(0).size(), 2u);
  EXPECT_EQ(nested->array_at(0).int_at(1), 2);
  EXPECT_EQ(nested->array_at(1).int_at(0), 3);
  const GgufValue* strs = m.get_array("strings", GgufType::String);
  ASSERT_EQ(strs->size(), 3u);
  EXPECT_EQ(strs->string_at(2), "ccc");
  // Type mismatches name the key.
  try {
    m.get_string("u32");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("mem.gguf: metadata 'u32' must be a string, got u32"));
  }
  EXPECT_THROW(m.get_array("strings", GgufType::F32), Error);
}

TEST(Gguf, VersionTwoAndAlignmentAreHonoured) {
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t align : {32u, 64u, 256u}) {
      test::GgufWriter w = tiny_writer();
      w.kv_u32("general.alignment", align);
      w.tensor("a", {3}, 0, test::GgufWriter::f32_bytes({1, 2, 3}));
      w.tensor("b", {2}, 0, test::GgufWriter::f32_bytes({4, 5}));
      const std::string bytes = w.bytes(version, align);
      GgufFile f("mem.gguf", bytes.data(), bytes.size());
      EXPECT_EQ(f.version(), version);
      EXPECT_EQ(f.alignment(), align);
      EXPECT_EQ(f.data_offset() % align, 0u);
      float b1;
      std::memcpy(&b1, f.tensors()[1].data + 4, 4);
      EXPECT_EQ(b1, 5.0f);
    }
  }
}

TEST(Gguf, SplitFilesJoinFromAnyPart) {
  TempDir dir;
  const std::vector<std::pair<std::string, float>> parts[] = {{{"token_embd.weight", 1.0f}}, {{"output_norm.weight", 2.0f}},
                                                              {{"output.weight", 3.0f}}};
  for (int i = 0; i < 3; ++i) {
    test::GgufWriter w = i == 0 ? tiny_writer() : test::GgufWriter{};
    w.kv_raw("split.no", 2, std::string{static_cast<char>(i), 0});
    w.kv_raw("split.count", 2, std::string{3, 0});
    w.kv_i32("split.tensors.count", 3);
    for (const auto& [name, v] : parts[i]) w.tensor(name, {2}, 0, test::GgufWriter::f32_bytes({v, v}));
    w.write(dir.path() / fmt::format("m-{:05d}-of-00003.gguf", i + 1));
  }
  for (int i = 1; i <= 3; ++i) {
    GgufModel m(dir.path() / fmt::format("m-{:05d}-of-00003.gguf", i));
    EXPECT_EQ(m.files().size(), 3u);
    EXPECT_EQ(m.get_int("llama.block_count"), 1);  // from the first part
    for (const char* t : {"token_embd.weight", "output_norm.weight", "output.weight"}) EXPECT_NE(m.tensor(t), nullptr);
  }
  fs::remove(dir.path() / "m-00003-of-00003.gguf");
  try {
    GgufModel m(dir.path() / "m-00001-of-00003.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("part 3 of 3"));
  }
}

}  // namespace
}  // namespace cypris
