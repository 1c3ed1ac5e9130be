// config.json parsing: defaults, per-architecture sliding-window rules, generation_config,
// --dtype / --max-model-len / --rope-scaling / --rope-theta rules and their error messages.
#include "engine/loader/model_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/common/error.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weights.h"
#include "models/registry/registry.h"
#include "models/rope.h"
#include "tests/support/error_of.h"

namespace cypris {
namespace {

const char* kLlama = R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,
  "intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"vocab_size":100,
  "max_position_embeddings":256,"torch_dtype":"bfloat16","eos_token_id":2})";

using test::error_of;

TEST(ModelConfig, DefaultsAndDerivedFields) {
  ModelConfig c = parse_model_config(model_families(), kLlama, "cfg.json");
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_model_len, 256);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c.layer_sliding_window, std::vector<int>(4, 0));
}

TEST(ModelConfig, GenerationConfigOverridesEos) {
  ModelConfig c = parse_model_config(model_families(), kLlama, "/m/config.json", {}, R"({"eos_token_id":[7,9],"bos_token_id":5})");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(c.bos_token_id, 5);
}

TEST(ModelConfig, MissingOrBadFieldsNameTheField) {
  EXPECT_NE(error_of([] {
              parse_model_config(model_families(), R"({"architectures":["LlamaForCausalLM"]})", "x/config.json");
            }).find("'hidden_size'"),
            std::string::npos);
  std::string e = error_of([] {
    parse_model_config(model_families(), R"({"architectures":["LlamaForCausalLM"],"hidden_size":"64","intermediate_size":1,
      "num_hidden_layers":1,"num_attention_heads":1,"vocab_size":1})",
                       "x/config.json");
  });
  EXPECT_NE(e.find("x/config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size"), std::string::npos) << e;
  EXPECT_NE(error_of([] { parse_model_config(model_families(), "{not json", "x/config.json"); }).find("malformed JSON"),
            std::string::npos);
}

// issue #20 item 1: max_position_embeddings = 2^62 overflowed the rope table's size and crashed;
// 2^30..2^40 gave a bare std::bad_alloc. Every such size is an error naming the file and field.
TEST(ModelConfig, HugePositionCountsAreRangeErrorsNamingTheField) {
  for (const char* v : {"4611686018427387904", "1073741824", "1099511627776", "-5"}) {
    std::string cfg = kLlama;
    cfg.replace(cfg.find("\"max_position_embeddings\":256"), 29, std::string("\"max_position_embeddings\":") + v);
    const std::string msg = error_of([&] { parse_model_config(model_families(), cfg, "m/config.json"); });
    EXPECT_NE(msg.find("m/config.json"), std::string::npos) << v << ": " << msg;
    EXPECT_NE(msg.find("max_position_embeddings"), std::string::npos) << v << ": " << msg;
  }
  // Rope scaling cannot stretch the allowed length past the same bound.
  std::string cfg = kLlama;
  cfg.insert(cfg.size() - 1, R"(,"rope_scaling":{"rope_type":"linear","factor":1e15})");
  EXPECT_LE(max_allowed_model_len(parse_model_config(model_families(), cfg, "c")), kMaxPositions);
  // Ids that do not fit an int32 token id.
  cfg = kLlama;
  cfg.replace(cfg.find("\"eos_token_id\":2"), 16, "\"eos_token_id\":4294967298");
  EXPECT_NE(error_of([&] { parse_model_config(model_families(), cfg, "c"); }).find("eos_token_id"), std::string::npos);
}

TEST(Rope, TableSizeIsCheckedBeforeAllocating) {
  ModelConfig c = parse_model_config(model_families(), kLlama, "c");
  EXPECT_NE(error_of([&] { build_rope_cos_sin(c, int64_t{1} << 62); }).find("max_model_len"), std::string::npos);
  EXPECT_NE(error_of([&] { build_rope_cos_sin(c, 0); }).find("max_model_len"), std::string::npos);
  EXPECT_EQ(build_rope_cos_sin(c, 4).size(), size_t(4) * c.rotary_dim());
}

TEST(ModelConfig, MaxModelLenPastTheModelsLengthTurnsOnDynamicNtk) {
  ConfigOverrides o;
  o.max_model_len = 128;
  ModelConfig shorter = parse_model_config(model_families(), kLlama, "c", o);
  EXPECT_EQ(shorter.max_model_len, 128);
  EXPECT_EQ(shorter.rope_scaling.type, "default");
  // Aphrodite: "If set to a higher value, will use automatic RoPE scaling".
  o.max_model_len = 640;
  ModelConfig longer = parse_model_config(model_families(), kLlama, "c", o);
  EXPECT_EQ(longer.max_model_len, 640);
  EXPECT_EQ(longer.rope_scaling.type, "dynamic");
  EXPECT_DOUBLE_EQ(longer.rope_scaling.factor, 2.5);
  // Dynamic NTK (transformers' _compute_dynamic_ntk_parameters, computed here in double): positions
  // inside the original 256 keep the model's frequencies; position p past it uses the base
  // theta * (factor * (p + 1) / 256 - (factor - 1)) ^ (dim / (dim - 2)).
  const int dim = longer.rotary_dim(), half = dim / 2;
  const std::vector<float> table = build_rope_cos_sin(longer, 640);
  const std::vector<float> plain = build_rope_cos_sin(parse_model_config(model_families(), kLlama, "c"), 256);
  for (int64_t p : {0, 100, 255, 256, 400, 639}) {
    const double base = p < 256 ? 10000.0 : 10000.0 * std::pow(2.5 * (p + 1) / 256.0 - 1.5, double(dim) / (dim - 2));
    for (int i = 0; i < half; ++i) {
      const double angle = double(p) * std::pow(base, -2.0 * i / dim);
      EXPECT_NEAR(table[p * dim + i], std::cos(angle), 2e-3) << p << " " << i;
      EXPECT_NEAR(table[p * dim + half + i], std::sin(angle), 2e-3) << p << " " << i;
      if (p < 256) EXPECT_EQ(table[p * dim + i], plain[p * dim + i]);
    }
  }
  // A model's own rope scaling still bounds the length.
  o.rope_scaling_json = R"({"rope_type":"linear","factor":2.0})";
  o.max_model_len = 512;
  EXPECT_EQ(parse_model_config(model_families(), kLlama, "c", o).max_model_len, 512);
  o.max_model_len = 513;
  EXPECT_NE(error_of([&] { parse_model_config(model_families(), kLlama, "c", o); }).find("512"), std::string::npos);
}

TEST(ModelConfig, DisableSlidingWindowCapsTheContextAtTheWindow) {
  const char* q = R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":64,
      "intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"vocab_size":100,
      "max_position_embeddings":256,"sliding_window":32,"max_window_layers":2,"use_sliding_window":true})";
  ConfigOverrides o;
  o.disable_sliding_window = true;
  ModelConfig c = parse_model_config(model_families(), q, "c", o);
  EXPECT_EQ(c.max_model_len, 32);
  EXPECT_EQ(c.layer_sliding_window, std::vector<int>(4, 0));
  o.max_model_len = 16;
  EXPECT_EQ(parse_model_config(model_families(), q, "c", o).max_model_len, 16);
  o.max_model_len = 64;
  const std::string e = error_of([&] { parse_model_config(model_families(), q, "c", o); });
  EXPECT_NE(e.find("--disable-sliding-window"), std::string::npos) << e;
  EXPECT_NE(e.find("32"), std::string::npos) << e;
  // A model without a window is unchanged.
  ConfigOverrides plain;
  plain.disable_sliding_window = true;
  EXPECT_EQ(parse_model_config(model_families(), kLlama, "c", plain).max_model_len, 256);
}

TEST(ModelConfig, RopeOverridesAndValidation) {
  ConfigOverrides o;
  o.rope_theta = 500000.0;
  o.rope_scaling_json = R"({"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
                            "original_max_position_embeddings":8192})";
  ModelConfig c = parse_model_config(model_families(), kLlama, "c", o);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  o.rope_scaling_json = R"({"rope_type":"longrope2","factor":2})";
  EXPECT_NE(error_of([&] { parse_model_config(model_families(), kLlama, "c", o); }).find("longrope2"), std::string::npos);
  o.rope_scaling_json = R"({"type":"linear"})";
  EXPECT_NE(error_of([&] { parse_model_config(model_families(), kLlama, "c", o); }).find("'factor'"), std::string::npos);
  o.rope_scaling_json = "{oops";
  EXPECT_NE(error_of([&] { parse_model_config(model_families(), kLlama, "c", o); }).find("--rope-scaling"), std::string::npos);
}

TEST(ModelConfig, SlidingWindowPerArchitecture) {
  ModelConfig m = parse_model_config(model_families(), R"({"architectures":["MistralForCausalLM"],"model_type":"mistral","hidden_size":64,"intermediate_size":128,
          "num_hidden_layers":3,"num_attention_heads":8,"num_key_value_heads":2,"vocab_size":100,"sliding_window":4096})",
      "c");
  EXPECT_EQ(m.layer_sliding_window, std::vector<int>(3, 4096));
  ModelConfig none = parse_model_config(model_families(), R"({"architectures":["MistralForCausalLM"],"hidden_size":64,"intermediate_size":128,
          "num_hidden_layers":3,"num_attention_heads":8,"vocab_size":100,"sliding_window":null})",
      "c");
  EXPECT_EQ(none.layer_sliding_window, std::vector<int>(3, 0));
  // Qwen2: only with use_sliding_window, and from max_window_layers on.
  const char* q = R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":64,
      "intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"vocab_size":100,
      "sliding_window":32,"max_window_layers":2,"use_sliding_window":USE})";
  std::string on = q, off = q;
  on.replace(on.find("USE"), 3, "true");
  off.replace(off.find("USE"), 3, "false");
  EXPECT_EQ(parse_model_config(model_families(), on, "c").layer_sliding_window, (std::vector<int>{0, 0, 32, 32}));
  EXPECT_EQ(parse_model_config(model_families(), off, "c").layer_sliding_window, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_TRUE(parse_model_config(model_families(), on, "c").qkv_bias);
  EXPECT_FALSE(parse_model_config(model_families(), on, "c").o_bias);
}

TEST(LoadOptions, DtypeRules) {
  EXPECT_EQ(resolve_dtype("auto", "float32"), DType::F16);
  EXPECT_EQ(resolve_dtype("auto", "float16"), DType::F16);
  EXPECT_EQ(resolve_dtype("auto", "bfloat16"), DType::BF16);
  EXPECT_EQ(resolve_dtype("auto", ""), DType::F16);
  EXPECT_EQ(resolve_dtype("half", "bfloat16"), DType::F16);
  EXPECT_EQ(resolve_dtype("float", "bfloat16"), DType::F32);
  EXPECT_NE(error_of([] { resolve_dtype("fp8", "float32"); }).find("auto, half"), std::string::npos);
}

// Hand-computed: head_dim 8, theta 10000 -> inv_freq = 1, 0.1, 0.01, 0.001.
TEST(Rope, DefaultAndLinearFrequencies) {
  ModelConfig c = parse_model_config(model_families(), kLlama, "c");
  RopeParameters p = compute_rope_parameters(c);
  ASSERT_EQ(p.inv_freq.size(), 4u);
  EXPECT_NEAR(p.inv_freq[1], 0.1f, 1e-7);
  EXPECT_NEAR(p.inv_freq[3], 0.001f, 1e-9);
  ConfigOverrides o;
  o.rope_scaling_json = R"({"type":"linear","factor":4.0})";
  EXPECT_NEAR(compute_rope_parameters(parse_model_config(model_families(), kLlama, "c", o)).inv_freq[1], 0.025f, 1e-8);
  // llama3 with original 64: wavelengths 6.28 (high: kept), 62.8 (medium: smoothed), 628 and
  // 6283 (low: divided by the factor 8). Medium: smooth = (64/62.83 - 1)/(4 - 1) = 0.006123.
  o.rope_scaling_json = R"({"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
                            "original_max_position_embeddings":64})";
  p = compute_rope_parameters(parse_model_config(model_families(), kLlama, "c", o));
  EXPECT_NEAR(p.inv_freq[0], 1.0f, 1e-7);
  const double smooth = (64.0 / (2 * M_PI / 0.1) - 1.0) / 3.0;
  EXPECT_NEAR(p.inv_freq[1], (1 - smooth) * 0.1 / 8 + smooth * 0.1, 1e-7);
  EXPECT_NEAR(p.inv_freq[2], 0.01f / 8, 1e-9);
  // yarn default attention factor: 0.1 * ln(4) + 1.
  o.rope_scaling_json = R"({"rope_type":"yarn","factor":4.0})";
  EXPECT_NEAR(compute_rope_parameters(parse_model_config(model_families(), kLlama, "c", o)).attention_factor, 0.1 * std::log(4.0) + 1,
              1e-6);
}

// The parameter counts `cypris bench latency` reports, against the checkpoints themselves: the total
// is the number of weight elements in the file (biases and the per-head q/k norms aside, which the
// count leaves out), and the active count leaves out the experts a token does not run: (E - k) / E
// of every expert tensor.
TEST(ModelConfig, ParameterCountsMatchTheCheckpoints) {
  for (const char* name : {"llama_gqa_tied", "qwen3_moe_top2_of_8", "mixtral_top2_of_8", "qwen2_moe_shared_expert"}) {
    const auto dir = std::filesystem::path(CYPRIS_FIXTURES_DIR) / "models" / name;
    const ModelConfig c = load_model_config(model_families(), dir);
    SafetensorsFile f(dir / "model.safetensors");
    double total = 0, experts = 0;
    for (const auto& [tensor, t] : f.tensors()) {
      if (tensor.find("bias") != std::string::npos || tensor.find("q_norm") != std::string::npos ||
          tensor.find("k_norm") != std::string::npos) {
        continue;
      }
      total += static_cast<double>(t.numel());
      if (tensor.find(".experts.") != std::string::npos) experts += static_cast<double>(t.numel());
    }
    const ModelConfig::ParameterCount n = c.approx_parameters();
    EXPECT_DOUBLE_EQ(n.total, total) << name;
    const double unused = c.num_experts > 0 ? experts * (c.num_experts - c.num_experts_per_tok) / c.num_experts : 0.0;
    EXPECT_DOUBLE_EQ(n.active, total - unused) << name;
    if (c.num_experts > 0) EXPECT_LT(n.active, n.total) << name;
  }
}

}  // namespace
}  // namespace cypris
