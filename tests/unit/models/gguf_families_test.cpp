// GGUF files of the families beyond Llama: a checkpoint written the way llama.cpp's
// convert_hf_to_gguf.py writes that architecture (its metadata keys and tensor names, gguf-py's
// constants; no q/k row permutation for Qwen) must load to the same model as the Hugging Face
// checkpoint it came from. The safetensors side is the torch-verified family fixture
// (tests/fixtures/models, family_reference_test.cpp), with its config reduced to what the GGUF
// architecture can express.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/reference_fixture.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::GgufWriter;

struct F32Tensor {
  std::vector<int64_t> shape;
  std::string bytes;
};

// The F32 tensors of a model.safetensors file (read here from the format's description: an 8-byte
// header length, a JSON header of dtype/shape/data_offsets, then the data).
std::map<std::string, F32Tensor> read_safetensors(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  const std::string data((std::istreambuf_iterator<char>(in)), {});
  std::map<std::string, F32Tensor> out;
  const json j = json::parse(header);
  for (const auto& [name, t] : j.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(t["dtype"], "F32") << name;
    const auto off = t["data_offsets"].get<std::vector<size_t>>();
    out[name] = {t["shape"].get<std::vector<int64_t>>(), data.substr(off[0], off[1] - off[0])};
  }
  return out;
}

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("gguf_family") {}
};

void write_safetensors(const fs::path& path, const std::map<std::string, F32Tensor>& tensors) {
  json header;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  const std::string h = header.dump();
  const uint64_t len = h.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << h;
  for (const auto& [name, t] : tensors) out << t.bytes;
}

// llama.cpp's tensor name for a Hugging Face one (gguf-py's TensorNameMap), "" to leave it out.
// Experts: the merged name ("blk.N.ffn_up_exps.weight") and the expert's index in *expert.
std::string llama_cpp_name(const std::string& hf, int* expert, bool gemma) {
  static const std::map<std::string, std::string> global = {{"model.embed_tokens.weight", "token_embd.weight"},
                                                            {"model.norm.weight", "output_norm.weight"},
                                                            {"lm_head.weight", "output.weight"}};
  static const std::map<std::string, std::string> layer = {
      {"input_layernorm.weight", "attn_norm.weight"},     {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},       {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},       {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},  {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},        {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},        {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"}, {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
      {"mlp.gate_up_proj.weight", "ffn_up.weight"},       {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},           {"self_attn.v_proj.bias", "attn_v.bias"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"}};
  static const std::map<std::string, std::string> experts = {
      {"gate_proj.weight", "ffn_gate_exps.weight"}, {"up_proj.weight", "ffn_up_exps.weight"},
      {"down_proj.weight", "ffn_down_exps.weight"}, {"w1.weight", "ffn_gate_exps.weight"},
      {"w3.weight", "ffn_up_exps.weight"},          {"w2.weight", "ffn_down_exps.weight"}};
  static const std::map<std::string, std::string> gemma_layer = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"}};
  *expert = -1;
  if (auto it = global.find(hf); it != global.end()) return it->second;
  const std::string prefix = "model.layers.";
  if (!hf.starts_with(prefix)) return "";
  const size_t dot = hf.find('.', prefix.size());
  const std::string n = hf.substr(prefix.size(), dot - prefix.size()), rest = hf.substr(dot + 1);
  if (auto it = gemma_layer.find(rest); gemma && it != gemma_layer.end()) return "blk." + n + "." + it->second;
  if (auto it = layer.find(rest); it != layer.end()) return "blk." + n + "." + it->second;
  for (const std::string e : {"mlp.experts.", "block_sparse_moe.experts."}) {
    if (!rest.starts_with(e)) continue;
    const size_t d = rest.find('.', e.size());
    *expert = std::stoi(rest.substr(e.size(), d - e.size()));
    auto it = experts.find(rest.substr(d + 1));
    return it == experts.end() ? "" : "blk." + n + "." + it->second;
  }
  return "";
}

// llama.cpp's LlamaModel.permute: its rotary pairs adjacent elements, so within each head the
// rows of the two halves are interleaved: row h*D + 2i + s is Hugging Face row h*D + s*D/2 + i.
std::string permute_rows(const F32Tensor& t, int64_t heads) {
  const int64_t rows = t.shape[0], cols = t.shape.size() > 1 ? t.shape[1] : 1, d = rows / heads;
  std::string out(t.bytes.size(), '\0');
  const size_t row_bytes = static_cast<size_t>(cols) * 4;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s)
        std::memcpy(out.data() + (h * d + 2 * i + s) * row_bytes, t.bytes.data() + (h * d + s * d / 2 + i) * row_bytes,
                    row_bytes);
  return out;
}

// A GGUF of a Hugging Face checkpoint as llama.cpp's converter writes it for `arch`: the common
// metadata keys, the tensor names above, each layer's experts stacked into one [experts, rows, cols]
// tensor, q/k rows permuted for "llama", Gemma's norms stored as 1 + w. F32 throughout.
// legacy_experts: one 2-D tensor per expert ("blk.N.ffn_up.E.weight"), as files converted before
// llama.cpp merged them.
void write_llama_cpp_gguf(const std::map<std::string, F32Tensor>& tensors, const json& cfg, const std::string& arch,
                          const fs::path& out, bool legacy_experts = false) {
  GgufWriter w;
  const auto u32 = [](const json& v) { return v.get<uint32_t>(); };
  const int64_t heads = cfg["num_attention_heads"], kv_heads = cfg["num_key_value_heads"];
  const int64_t head_dim = cfg.contains("head_dim") ? cfg["head_dim"].get<int64_t>()
                                                    : cfg["hidden_size"].get<int64_t>() / heads;
  w.kv_str("general.architecture", arch);
  w.kv_u32(arch + ".context_length", u32(cfg["max_position_embeddings"]));
  w.kv_u32(arch + ".embedding_length", u32(cfg["hidden_size"]));
  w.kv_u32(arch + ".block_count", u32(cfg["num_hidden_layers"]));
  w.kv_u32(arch + ".feed_forward_length", u32(cfg["intermediate_size"]));
  w.kv_u32(arch + ".attention.head_count", static_cast<uint32_t>(heads));
  w.kv_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(kv_heads));
  w.kv_u32(arch + ".attention.key_length", static_cast<uint32_t>(head_dim));
  w.kv_u32(arch + ".attention.value_length", static_cast<uint32_t>(head_dim));
  w.kv_u32(arch + ".rope.dimension_count",
           static_cast<uint32_t>(static_cast<double>(head_dim) * cfg.value("partial_rotary_factor", 1.0)));
  w.kv_f32(arch + ".attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"].get<float>());
  if (cfg.contains("layer_norm_eps"))
    w.kv_f32(arch + ".attention.layer_norm_epsilon", cfg["layer_norm_eps"].get<float>());
  if (cfg.contains("logit_scale")) w.kv_f32(arch + ".logit_scale", cfg["logit_scale"].get<float>());
  w.kv_f32(arch + ".rope.freq_base", cfg["rope_theta"].get<float>());
  w.kv_u32(arch + ".vocab_size", u32(cfg["vocab_size"]));
  const bool gemma = arch.starts_with("gemma");
  if (cfg.contains("sliding_window") && (gemma || arch == "phi3" || arch == "cohere2"))
    w.kv_u32(arch + ".attention.sliding_window", u32(cfg["sliding_window"]));
  for (const char* cap : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (cfg.contains(cap)) w.kv_f32(arch + "." + cap, cfg[cap].get<float>());
  if (cfg.contains("rope_scaling") && cfg["rope_scaling"].contains("long_factor")) {
    // Phi3MiniModel: the factor lists as tensors, the pre-training length as a key.
    const auto longf = cfg["rope_scaling"]["long_factor"].get<std::vector<float>>();
    const auto shortf = cfg["rope_scaling"]["short_factor"].get<std::vector<float>>();
    w.tensor("rope_factors_long.weight", {static_cast<int64_t>(longf.size())}, 0, GgufWriter::f32_bytes(longf));
    w.tensor("rope_factors_short.weight", {static_cast<int64_t>(shortf.size())}, 0, GgufWriter::f32_bytes(shortf));
    w.kv_u32(arch + ".rope.scaling.original_context_length", u32(cfg["original_max_position_embeddings"]));
  } else if (cfg.contains("rope_scaling")) {
    w.kv_str(arch + ".rope.scaling.type", cfg["rope_scaling"]["rope_type"].get<std::string>());
    w.kv_f32(arch + ".rope.scaling.factor", cfg["rope_scaling"]["factor"].get<float>());
  }
  const int64_t experts = cfg.value("num_experts", cfg.value("num_local_experts", 0));
  if (experts > 0) {
    w.kv_u32(arch + ".expert_count", static_cast<uint32_t>(experts));
    w.kv_u32(arch + ".expert_used_count", u32(cfg["num_experts_per_tok"]));
    if (cfg.contains("moe_intermediate_size"))
      w.kv_u32(arch + ".expert_feed_forward_length", u32(cfg["moe_intermediate_size"]));
    if (cfg.contains("shared_expert_intermediate_size"))
      w.kv_u32(arch + ".expert_shared_feed_forward_length", u32(cfg["shared_expert_intermediate_size"]));
  }
  w.kv_u32("tokenizer.ggml.bos_token_id", u32(cfg["bos_token_id"]));
  w.kv_u32("tokenizer.ggml.eos_token_id", u32(cfg["eos_token_id"]));
  std::map<std::string, std::vector<const F32Tensor*>> stacked;  // merged name -> experts in order
  for (const auto& [name, t] : tensors) {
    int expert = -1;
    const std::string g = llama_cpp_name(name, &expert, gemma);
    if (g.empty()) continue;
    if (expert >= 0 && legacy_experts) {
      const std::string kind = g.substr(0, g.size() - std::string("_exps.weight").size());
      w.tensor(kind + "." + std::to_string(expert) + ".weight", std::vector<int64_t>(t.shape.rbegin(), t.shape.rend()),
               0, t.bytes);
      continue;
    }
    if (expert >= 0) {
      auto& slot = stacked[g];
      if (slot.size() <= static_cast<size_t>(expert)) slot.resize(expert + 1);
      slot[expert] = &t;
      continue;
    }
    std::string bytes = t.bytes;
    if (arch == "llama" && g.ends_with("attn_q.weight")) bytes = permute_rows(t, heads);
    if (arch == "llama" && g.ends_with("attn_k.weight")) bytes = permute_rows(t, kv_heads);
    if (gemma && g.ends_with("norm.weight")) {
      auto* v = reinterpret_cast<float*>(bytes.data());
      for (size_t i = 0; i < bytes.size() / 4; ++i) v[i] += 1.0f;
    }
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    if (g.ends_with("ffn_gate_inp_shexp.weight")) ne = {t.shape[1]};  // a vector, as some files have it
    w.tensor(g, ne, 0, bytes);
  }
  for (const auto& [g, parts] : stacked) {
    std::string bytes;
    for (const F32Tensor* p : parts) bytes += p->bytes;
    const auto& s = parts.front()->shape;
    w.tensor(g, {s[1], s[0], static_cast<int64_t>(parts.size())}, 0, bytes);
  }
  w.write(out);
}

ModelRunnerOptions runner_options(const fs::path& model) {
  ModelRunnerOptions o;
  o.model_dir = model;
  o.load.dtype = "float32";
  o.threads = 2;
  o.num_blocks = 16;
  return o;
}

// Both models' logits for ids, position by position, within fp32 reordering (1e-6 of the scale).
void expect_same_logits(const fs::path& a_dir, const fs::path& b_dir, const std::vector<int32_t>& ids) {
  ModelRunner a_runner(runner_options(a_dir));
  ModelRunner b_runner(runner_options(b_dir));
  const Logits a = reference_fixture::full_prefill(a_runner, ids);
  const Logits b = reference_fixture::full_prefill(b_runner, ids);
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.vocab, b.vocab);
  for (int64_t r = 0; r < a.rows; ++r) {
    EXPECT_LT(reference_fixture::rel_err(b.row(r), a.row(r), a.vocab), 1e-6) << "position " << r;
  }
}

// A family fixture's checkpoint with its config reduced to what the GGUF architecture can express.
fs::path fixture_checkpoint(const std::string& fixture, const fs::path& dir,
                            const std::function<void(json&)>& reduce) {
  const std::string src = reference_fixture::kFixtures + fixture;
  std::ifstream cin(src + "/config.json");
  json cfg = json::parse(cin);
  reduce(cfg);
  fs::create_directories(dir);
  fs::copy_file(src + "/model.safetensors", dir / "model.safetensors");
  std::ofstream(dir / "config.json") << cfg.dump(2);
  return dir;
}

json read_config(const fs::path& dir) {
  std::ifstream in(dir / "config.json");
  return json::parse(in);
}

// The family fixture (config reduced by `reduce`) written as llama.cpp writes `arch`, loaded both
// ways, compared on the fixture's prompt.
void expect_gguf_equals_fixture(const std::string& fixture, const std::string& arch,
                                const std::function<void(json&)>& reduce, bool legacy_experts = false) {
  TempDir tmp;
  const fs::path hf = fixture_checkpoint(fixture, tmp.path() / "hf", reduce);
  const fs::path gguf = tmp.path() / (arch + "-F32.gguf");
  write_llama_cpp_gguf(read_safetensors(hf / "model.safetensors"), read_config(hf), arch, gguf, legacy_experts);
  expect_same_logits(hf, gguf, reference_fixture::load_expected(fixture).ids);
}

// Qwen3 as llama.cpp's Qwen3Model writes it: architecture "qwen3", no biases, per-head q/k norms,
// head_dim as attention.key_length, no sliding window.
TEST(GgufFamilies, Qwen3FileLoadsTheSameModelAsItsCheckpoint) {
  expect_gguf_equals_fixture("qwen3_qknorm_sliding", "qwen3", [](json& cfg) {
    cfg["attention_bias"] = false;  // neither biases nor a sliding window exist in llama.cpp's qwen3
    cfg["use_sliding_window"] = false;
    cfg.erase("sliding_window");
    cfg.erase("max_window_layers");
  });
}

// Mixtral as llama.cpp writes it: architecture "llama" with llama.expert_count, q/k rows permuted,
// each layer's experts in ffn_{gate,up,down}_exps.
TEST(GgufFamilies, MixtralFileLoadsTheSameModelAsItsCheckpoint) {
  for (bool legacy : {false, true}) {
    SCOPED_TRACE(legacy ? "one tensor per expert" : "merged experts");
    expect_gguf_equals_fixture("mixtral_top2_of_8", "llama", [](json& cfg) { cfg.erase("sliding_window"); }, legacy);
  }
}

// Gemma 2 (architecture "gemma2"): norms with the +1 folded in and renamed, softcaps and window
// from the keys, query_pre_attn_scalar derived as llama.cpp does (head_dim below 27B).
TEST(GgufFamilies, Gemma2FileLoadsTheSameModelAsItsCheckpoint) {
  expect_gguf_equals_fixture("gemma2_softcap_sliding", "gemma2",
                             [](json& cfg) { cfg["query_pre_attn_scalar"] = cfg["head_dim"]; });
}

// Gemma 3 (architecture "gemma3"): q/k norms, linear rope scaling for the global layers, every sixth
// layer global, local rope base 10000, no softcaps.
TEST(GgufFamilies, Gemma3FileLoadsTheSameModelAsItsCheckpoint) {
  expect_gguf_equals_fixture("gemma3_local_global", "gemma3", [](json& cfg) {
    cfg["query_pre_attn_scalar"] = cfg["head_dim"];
    cfg["sliding_window_pattern"] = 6;
    cfg["rope_local_base_freq"] = 10000.0;
    cfg.erase("attn_logit_softcapping");
    cfg.erase("final_logit_softcapping");
  });
}

// Phi-3 (architecture "phi3"): fused attn_qkv and gate+up tensors, partial rotary, a sliding
// window, LongRoPE factors as tensors (the fixture's prompt is past the pre-training length, so
// the long factors are in use).
TEST(GgufFamilies, Phi3FileLoadsTheSameModelAsItsCheckpoint) {
  expect_gguf_equals_fixture("phi3_fused_longrope", "phi3", [](json&) {});
}

// Command-R and Command R+ ("command-r") and Command R7B ("cohere2", every fourth layer global
// without rotary, as llama.cpp fixes it): LayerNorm epsilon and logit_scale from the keys, q/k rows
// in the checkpoint's order (llama.cpp's rotary for these is the interleaved one Cohere uses).
TEST(GgufFamilies, CohereFilesLoadTheSameModelAsTheirCheckpoints) {
  expect_gguf_equals_fixture("cohere_parallel_block", "command-r", [](json&) {});
  expect_gguf_equals_fixture("cohere2_sliding_nope", "cohere2", [](json& cfg) { cfg["sliding_window_pattern"] = 4; });
  // Command R+ (use_qk_norm): attn_q_norm / attn_k_norm, one LayerNorm weight row per head.
  expect_gguf_equals_fixture("cohere_plus_qk_norm", "command-r", [](json&) {});
}

// Qwen3-MoE ("qwen3moe": q/k norms, top-k renormalised) and Qwen2-MoE ("qwen2moe": q/k/v biases,
// top-k not renormalised, a shared expert with a sigmoid gate stored as a vector): every layer
// routed, which the family fixtures (with a dense layer) cannot say, so the checkpoints are random.
class GgufMoe : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufMoe, FileLoadsTheSameModelAsItsCheckpoint) {
  const bool qwen2 = GetParam() == "qwen2moe";
  const int64_t h = 32, d = 16, heads = 4, kv = 2, experts = 4, ff = 24, shared_ff = 40, vocab = 64, layers = 2;
  json cfg = {{"architectures", {qwen2 ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM"}},
              {"model_type", qwen2 ? "qwen2_moe" : "qwen3_moe"}, {"hidden_size", h},
              {"intermediate_size", 48}, {"num_hidden_layers", layers}, {"num_attention_heads", heads},
              {"num_key_value_heads", kv}, {"head_dim", d}, {"vocab_size", vocab}, {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"torch_dtype", "float32"}, {"bos_token_id", 1},
              {"eos_token_id", 2}, {"hidden_act", "silu"}, {"num_experts", experts}, {"num_experts_per_tok", 2},
              {"moe_intermediate_size", ff}, {"norm_topk_prob", !qwen2}, {"tie_word_embeddings", false}};
  if (qwen2) cfg["shared_expert_intermediate_size"] = shared_ff;
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  std::map<std::string, F32Tensor> t;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm = false) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = norm ? 1.0f + 0.1f * nd(gen) : nd(gen);
    t[name] = {shape, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)};
  };
  add("model.embed_tokens.weight", {vocab, h});
  add("model.norm.weight", {h}, true);
  add("lm_head.weight", {vocab, h});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h}, true);
    add(p + "post_attention_layernorm.weight", {h}, true);
    add(p + "self_attn.q_proj.weight", {heads * d, h});
    add(p + "self_attn.k_proj.weight", {kv * d, h});
    add(p + "self_attn.v_proj.weight", {kv * d, h});
    add(p + "self_attn.o_proj.weight", {h, heads * d});
    if (qwen2) {
      add(p + "self_attn.q_proj.bias", {heads * d});
      add(p + "self_attn.k_proj.bias", {kv * d});
      add(p + "self_attn.v_proj.bias", {kv * d});
      add(p + "mlp.shared_expert.gate_proj.weight", {shared_ff, h});
      add(p + "mlp.shared_expert.up_proj.weight", {shared_ff, h});
      add(p + "mlp.shared_expert.down_proj.weight", {h, shared_ff});
      add(p + "mlp.shared_expert_gate.weight", {1, h});
    } else {
      add(p + "self_attn.q_norm.weight", {d}, true);
      add(p + "self_attn.k_norm.weight", {d}, true);
    }
    add(p + "mlp.gate.weight", {experts, h});
    for (int64_t e = 0; e < experts; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      add(x + "gate_proj.weight", {ff, h});
      add(x + "up_proj.weight", {ff, h});
      add(x + "down_proj.weight", {h, ff});
    }
  }
  TempDir tmp;
  const fs::path hf = tmp.path() / "hf";
  fs::create_directories(hf);
  write_safetensors(hf / "model.safetensors", t);
  std::ofstream(hf / "config.json") << cfg.dump(2);
  const fs::path gguf = tmp.path() / (GetParam() + "-F32.gguf");
  write_llama_cpp_gguf(t, cfg, GetParam(), gguf);
  expect_same_logits(hf, gguf, {1, 5, 9, 13, 20, 31, 42, 7, 3, 60, 11, 2});
}

INSTANTIATE_TEST_SUITE_P(Archs, GgufMoe, ::testing::Values("qwen3moe", "qwen2moe"));

}  // namespace
}  // namespace cypris
