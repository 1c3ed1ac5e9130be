// PEFT LoRA adapter folders (engine/loader/lora_adapter.h): the fixtures of
// tests/tools/gen_lora_fixtures.py read with their ranks, scales (lora_alpha / r, rsLoRA's
// lora_alpha / sqrt(r)) and [r, in] / [out, r] matrices, from safetensors and from a torch.save
// .bin; and everything Cypris cannot apply refused with an error naming the file and the field or
// key: modules_to_save, DoRA, trained biases, per-module ranks, embedding LoRA, a rank above
// --max-lora-rank, a missing or malformed config, a lone A, GGUF adapters, a file instead of a folder.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/loader/lora_adapter.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using nlohmann::json;

const std::string kLora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/";

std::string error_of(const fs::path& dir, int64_t max_rank = 16) {
  try {
    load_lora_adapter(dir, max_rank);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A copy of a fixture adapter with its config changed by edit.
struct EditedAdapter {
  test::TempDir tmp{"lora"};
  explicit EditedAdapter(const std::string& fixture, const std::function<void(json&)>& edit = {}) {
    for (const auto& e : fs::directory_iterator(kLora + fixture)) fs::copy(e.path(), tmp.path() / e.path().filename());
    std::ifstream in(tmp.path() / "adapter_config.json");
    json cfg = json::parse(in);
    if (edit) edit(cfg);
    std::ofstream(tmp.path() / "adapter_config.json") << cfg.dump();
  }
  const fs::path& path() const { return tmp.path(); }
};

TEST(LoraAdapter, ReadsPeftFoldersWithTheirRankScaleAndShapes) {
  const LoraAdapter a = load_lora_adapter(kLora + "llama_gqa_tied/qv_r4", 16);
  EXPECT_EQ(a.rank, 4);
  EXPECT_FLOAT_EQ(a.scale, 8.0f / 4.0f);
  ASSERT_EQ(a.modules.size(), 4u);  // q and v of 2 layers
  const LoraModule& q = a.modules.at("model.layers.0.self_attn.q_proj");
  EXPECT_EQ(q.a.shape, (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(q.b.shape, (std::vector<int64_t>{32, 4}));
  EXPECT_EQ(a.modules.at("model.layers.1.self_attn.v_proj").b.shape, (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(a.nbytes(), 2 * (4 * 32 + 32 * 4 + 4 * 32 + 16 * 4) * sizeof(float));

  const LoraAdapter rs = load_lora_adapter(kLora + "llama_gqa_tied/all_r8_rslora", 16);
  EXPECT_TRUE(rs.use_rslora);
  EXPECT_FLOAT_EQ(rs.scale, static_cast<float>(16.0 / std::sqrt(8.0)));
  EXPECT_EQ(rs.modules.size(), 14u);  // 7 projections x 2 layers

  const LoraAdapter bin = load_lora_adapter(kLora + "llama_gqa_tied/mlp_o_r2_bin", 16);
  EXPECT_EQ(bin.modules.size(), 6u);
  EXPECT_EQ(bin.modules.at("model.layers.1.mlp.down_proj").a.shape, (std::vector<int64_t>{2, 48}));

  const LoraAdapter fused = load_lora_adapter(kLora + "phi3_fused_longrope/fused_r4", 16);
  EXPECT_TRUE(fused.modules.count("model.layers.0.self_attn.qkv_proj"));
  EXPECT_TRUE(fused.modules.count("model.layers.0.mlp.gate_up_proj"));
}

TEST(LoraAdapter, ScaleFollowsPeft) {
  EXPECT_FLOAT_EQ(lora_scale(16, 8, false), 2.0f);
  EXPECT_FLOAT_EQ(lora_scale(16, 64, true), 2.0f);
}

TEST(LoraAdapter, RefusesWhatItCannotApplyByName) {
  struct Bad {
    std::function<void(json&)> edit;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {[](json& c) { c["modules_to_save"] = {"lm_head"}; }, "modules_to_save"},
      {[](json& c) { c["use_dora"] = true; }, "use_dora"},
      {[](json& c) { c["bias"] = "lora_only"; }, "bias"},
      {[](json& c) { c["rank_pattern"] = {{"q_proj", 8}}; }, "rank_pattern"},
      {[](json& c) { c["fan_in_fan_out"] = true; }, "fan_in_fan_out"},
      {[](json& c) { c["peft_type"] = "IA3"; }, "peft_type"},
      {[](json& c) { c["r"] = "four"; }, "'r'"},
      {[](json& c) { c["r"] = 8; }, "rank r = 8"},  // the tensors have rank 4
      {[](json& c) { c["lora_alpha"] = "x"; }, "lora_alpha"},
  };
  for (const Bad& b : bad) {
    EditedAdapter a("llama_gqa_tied/qv_r4", b.edit);
    EXPECT_THAT(error_of(a.path()), AllOf(HasSubstr("adapter_"), HasSubstr(b.says))) << b.says;
  }
  EXPECT_THAT(error_of(kLora + "llama_gqa_tied/all_r8_rslora", 4), HasSubstr("above --max-lora-rank 4"));
}

TEST(LoraAdapter, RefusesMalformedFoldersNamingTheFile) {
  test::TempDir empty("lora");
  EXPECT_THAT(error_of(empty.path()), HasSubstr("no adapter_config.json"));
  EXPECT_THAT(error_of(empty.path() / "missing"), HasSubstr("not a folder"));
  {
    EditedAdapter a("llama_gqa_tied/qv_r4");
    std::ofstream(a.path() / "adapter_config.json") << "{\"r\": 4,";
    EXPECT_THAT(error_of(a.path()), AllOf(HasSubstr("adapter_config.json"), HasSubstr("not valid JSON")));
  }
  {
    EditedAdapter a("llama_gqa_tied/qv_r4");
    fs::remove(a.path() / "adapter_model.safetensors");
    EXPECT_THAT(error_of(a.path()), HasSubstr("no adapter_model.safetensors or adapter_model.bin"));
  }
  {
    test::TempDir t("lora");
    std::ofstream(t.path() / "adapter.gguf") << "GGUF\x03";
    // A GGUF file is read as llama.cpp's LoRA format: a truncated one is an error naming it.
    EXPECT_THAT(error_of(t.path() / "adapter.gguf"), HasSubstr((t.path() / "adapter.gguf").string()));
  }
}

// Writes a safetensors file of F32 tensors (all zeros) with the given names and shapes.
void write_safetensors(const fs::path& p, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  json header = json::object();
  size_t off = 0;
  for (const auto& [name, shape] : tensors) {
    size_t n = 4;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream out(p, std::ios::binary);
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << h << std::string(off, '\0');
}

TEST(LoraAdapter, RefusesKeysThatAreNotLoraMatrices) {
  const std::string q = "base_model.model.model.layers.0.self_attn.q_proj.";
  const std::vector<std::pair<std::vector<std::pair<std::string, std::vector<int64_t>>>, std::string>> cases = {
      {{{q + "lora_A.weight", {4, 32}}}, "has lora_A but no lora_B"},
      {{{q + "lora_A.weight", {4, 32}}, {q + "lora_B.weight", {32, 4}}, {"base_model.model.lm_head.weight", {64, 32}}},
       "lm_head.weight"},
      {{{"base_model.model.model.embed_tokens.lora_embedding_A", {4, 64}}}, "embedding"},
      {{{"model.layers.0.self_attn.q_proj.lora_A.weight", {4, 32}}}, "does not start with"},
      {{{q + "lora_A.weight", {4, 32, 1}}, {q + "lora_B.weight", {32, 4}}}, "matrices"},
      {{}, "no lora_A / lora_B"},
  };
  for (const auto& [tensors, says] : cases) {
    EditedAdapter a("llama_gqa_tied/qv_r4");
    write_safetensors(a.path() / "adapter_model.safetensors", tensors);
    EXPECT_THAT(error_of(a.path()), AllOf(HasSubstr("adapter_model.safetensors"), HasSubstr(says))) << says;
  }
}

}  // namespace
}  // namespace cypris
