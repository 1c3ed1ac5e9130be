// GGUF files of the families beyond Llama: a checkpoint written the way llama.cpp's
// convert_hf_to_gguf.py writes that architecture (its metadata keys and tensor names, gguf-py's
// constants; no q/k row permutation for Qwen) must load to the same model as the Hugging Face
// checkpoint it came from. The safetensors side is the torch-verified family fixture
// (tests/fixtures/models, family_reference_test.cpp), with its config reduced to what the GGUF
// architecture can express.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/gguf_writer.h"
#include "tests/unit/models/reference_fixture.h"

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

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("cypris_gguf_family_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// llama.cpp's tensor name for a Hugging Face one (gguf-py's TensorNameMap), or "" to leave out.
std::string llama_cpp_name(const std::string& hf) {
  static const std::map<std::string, std::string> global = {{"model.embed_tokens.weight", "token_embd.weight"},
                                                            {"model.norm.weight", "output_norm.weight"},
                                                            {"lm_head.weight", "output.weight"}};
  static const std::map<std::string, std::string> layer = {
      {"input_layernorm.weight", "attn_norm.weight"},     {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},       {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},       {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},  {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},        {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  if (auto it = global.find(hf); it != global.end()) return it->second;
  const std::string prefix = "model.layers.";
  if (!hf.starts_with(prefix)) return "";
  const size_t dot = hf.find('.', prefix.size());
  const std::string n = hf.substr(prefix.size(), dot - prefix.size()), rest = hf.substr(dot + 1);
  auto it = layer.find(rest);
  return it == layer.end() ? "" : "blk." + n + "." + it->second;
}

// Qwen3 as llama.cpp's Qwen3Model writes it: architecture "qwen3", no biases, per-head q/k norms,
// head_dim as attention.key_length, no sliding window.
TEST(GgufFamilies, Qwen3FileLoadsTheSameModelAsItsCheckpoint) {
  const std::string fixture = reference_fixture::kFixtures + "qwen3_qknorm_sliding";
  std::ifstream cin(fixture + "/config.json");
  json cfg = json::parse(cin);
  cfg["attention_bias"] = false;  // neither biases nor a sliding window exist in llama.cpp's qwen3
  cfg["use_sliding_window"] = false;
  cfg.erase("sliding_window");
  cfg.erase("max_window_layers");

  TempDir tmp;
  const fs::path hf_dir = tmp.path() / "hf";
  fs::create_directories(hf_dir);
  fs::copy_file(fixture + "/model.safetensors", hf_dir / "model.safetensors");
  std::ofstream(hf_dir / "config.json") << cfg.dump(2);

  GgufWriter w;
  const auto u32 = [](const json& v) { return v.get<uint32_t>(); };
  w.kv_str("general.architecture", "qwen3");
  w.kv_u32("qwen3.context_length", u32(cfg["max_position_embeddings"]));
  w.kv_u32("qwen3.embedding_length", u32(cfg["hidden_size"]));
  w.kv_u32("qwen3.block_count", u32(cfg["num_hidden_layers"]));
  w.kv_u32("qwen3.feed_forward_length", u32(cfg["intermediate_size"]));
  w.kv_u32("qwen3.attention.head_count", u32(cfg["num_attention_heads"]));
  w.kv_u32("qwen3.attention.head_count_kv", u32(cfg["num_key_value_heads"]));
  w.kv_u32("qwen3.attention.key_length", u32(cfg["head_dim"]));
  w.kv_u32("qwen3.attention.value_length", u32(cfg["head_dim"]));
  w.kv_f32("qwen3.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"].get<float>());
  w.kv_f32("qwen3.rope.freq_base", cfg["rope_theta"].get<float>());
  w.kv_u32("qwen3.vocab_size", u32(cfg["vocab_size"]));
  w.kv_u32("tokenizer.ggml.bos_token_id", u32(cfg["bos_token_id"]));
  w.kv_u32("tokenizer.ggml.eos_token_id", u32(cfg["eos_token_id"]));
  int written = 0;
  for (const auto& [name, t] : read_safetensors(hf_dir / "model.safetensors")) {
    const std::string g = llama_cpp_name(name);
    if (g.empty()) continue;  // the biases
    w.tensor(g, std::vector<int64_t>(t.shape.rbegin(), t.shape.rend()), 0, t.bytes);
    ++written;
  }
  EXPECT_EQ(written, 3 + 11 * cfg["num_hidden_layers"].get<int>());
  const fs::path gguf = tmp.path() / "qwen3-F32.gguf";
  w.write(gguf);

  auto options = [](const fs::path& model) {
    ModelRunnerOptions o;
    o.model_dir = model;
    o.load.dtype = "float32";
    o.threads = 2;
    o.num_blocks = 16;
    return o;
  };
  ModelRunner from_hf(options(hf_dir));
  ModelRunner from_gguf(options(gguf));
  const std::vector<int32_t> ids = reference_fixture::load_expected("qwen3_qknorm_sliding").ids;
  const Logits a = reference_fixture::full_prefill(from_hf, ids);
  const Logits b = reference_fixture::full_prefill(from_gguf, ids);
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.vocab, b.vocab);
  for (int64_t r = 0; r < a.rows; ++r) {
    EXPECT_LT(reference_fixture::rel_err(b.row(r), a.row(r), a.vocab), 1e-6) << "position " << r;
  }
}

}  // namespace
}  // namespace cypris
