// Writes a Llama-shaped GGUF file with random (valid) weights for the whole-model benchmarks, e.g.
// `cypris bench latency --model OUT.gguf --threads 2` beside llama.cpp's `llama-bench` on the same
// file. No model of a realistic size can be downloaded here, and speed does not depend on the
// weights' values, only on their types and shapes.
//
//   bench_make_gguf OUT.gguf MIX [hidden ffn layers heads kv_heads vocab [experts top_k]]
//
// With experts > 0 every MLP is a Mixtral-style mixture of experts (llama architecture with
// llama.expert_count / expert_used_count, merged ffn_{gate,up,down}_exps tensors, an F32 router
// ffn_gate_inp as llama-quantize leaves it), each expert of width ffn.
//
// MIX: F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K (every 2-D tensor in that type), or Q4_K_M — llama.cpp's
// mix: Q4_K everywhere except output.weight Q6_K and attn_v / ffn_down Q6_K in the layers
// llama.cpp's use_more_bits picks (the first and last eighth, and every third layer between).
// Defaults: the ~110M Llama of the CPU benchmarks (768, 2048, 12 layers, 12 / 12 heads, vocab
// 32000). The vocabulary is a SentencePiece-style `llama` vocab: <unk> <s> </s>, the 256 byte
// tokens, then "▁t<i>" pieces; norms are F32.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/common/dtype.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quant_weights.h"

namespace {

using cypris::DType;
using cypris::test::GgufWriter;

// ggml's type ids (gguf.md).
uint32_t ggml_type(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q8_0: return 8;
    case DType::Q4_K: return 12;
    case DType::Q6_K: return 14;
    case DType::BF16: return 30;
    default: break;
  }
  std::fprintf(stderr, "make_gguf: no ggml id for this type\n");
  std::exit(2);
}

std::string random_tensor(DType t, int64_t n, int64_t k, uint32_t seed) {
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::string b(static_cast<size_t>(n * k) * cypris::dtype_size(t), '\0');
    for (int64_t i = 0; i < n * k; ++i) {
      const float v = nd(g);
      if (t == DType::F32) {
        reinterpret_cast<float*>(b.data())[i] = v;
      } else {
        reinterpret_cast<uint16_t*>(b.data())[i] = t == DType::F16 ? cypris::f32_to_f16(v) : cypris::f32_to_bf16(v);
      }
    }
    return b;
  }
  const auto w = cypris::test::random_weights(t, n, k, seed);
  return {reinterpret_cast<const char*>(w.data()), w.size()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 9 && argc != 11) {
    std::fprintf(stderr,
                 "usage: %s OUT.gguf F16|BF16|Q8_0|Q4_0|Q4_K|Q6_K|Q4_K_M [hidden ffn layers heads kv_heads vocab "
                 "[experts top_k]]\n",
                 argv[0]);
    return 2;
  }
  const std::string out = argv[1], mix = argv[2];
  int64_t hidden = 768, ffn = 2048, layers = 12, heads = 12, kv_heads = 12, vocab = 32000;
  int64_t experts = 0, top_k = 0;
  if (argc >= 9) {
    hidden = std::atoll(argv[3]), ffn = std::atoll(argv[4]), layers = std::atoll(argv[5]);
    heads = std::atoll(argv[6]), kv_heads = std::atoll(argv[7]), vocab = std::atoll(argv[8]);
  }
  if (argc == 11) {
    experts = std::atoll(argv[9]), top_k = std::atoll(argv[10]);
    if (experts < 2 || top_k < 1 || top_k > experts) {
      std::fprintf(stderr, "make_gguf: experts must be >= 2 and top_k in [1, experts]\n");
      return 2;
    }
  }
  if (hidden <= 0 || ffn <= 0 || layers <= 0 || heads <= 0 || kv_heads <= 0 || vocab < 260 ||
      hidden % heads != 0 || heads % kv_heads != 0) {
    std::fprintf(stderr, "make_gguf: bad shape (hidden divisible by heads, heads by kv_heads, vocab >= 260)\n");
    return 2;
  }
  const bool q4km = mix == "Q4_K_M";
  DType base;
  if (q4km) base = DType::Q4_K;
  else if (mix == "F16") base = DType::F16;
  else if (mix == "BF16") base = DType::BF16;
  else if (mix == "Q8_0") base = DType::Q8_0;
  else if (mix == "Q4_0") base = DType::Q4_0;
  else if (mix == "Q4_K") base = DType::Q4_K;
  else if (mix == "Q6_K") base = DType::Q6_K;
  else {
    std::fprintf(stderr, "make_gguf: unknown MIX '%s'\n", mix.c_str());
    return 2;
  }
  const int64_t block = cypris::dtype_block(base).elems;
  if (hidden % block != 0 || ffn % block != 0) {
    std::fprintf(stderr, "make_gguf: hidden and ffn must be multiples of %lld for %s\n",
                 static_cast<long long>(block), mix.c_str());
    return 2;
  }
  const int64_t head_dim = hidden / heads, kv_dim = kv_heads * head_dim;

  GgufWriter w;
  w.kv_str("general.architecture", "llama");
  w.kv_str("general.name", "cypris-bench-llama-" + mix);
  w.kv_u32("llama.context_length", 4096);
  w.kv_u32("llama.embedding_length", static_cast<uint32_t>(hidden));
  w.kv_u32("llama.feed_forward_length", static_cast<uint32_t>(ffn));
  w.kv_u32("llama.block_count", static_cast<uint32_t>(layers));
  w.kv_u32("llama.attention.head_count", static_cast<uint32_t>(heads));
  w.kv_u32("llama.attention.head_count_kv", static_cast<uint32_t>(kv_heads));
  w.kv_u32("llama.rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.kv_f32("llama.rope.freq_base", 10000.0f);
  w.kv_u32("llama.vocab_size", static_cast<uint32_t>(vocab));
  if (experts > 0) {
    w.kv_u32("llama.expert_count", static_cast<uint32_t>(experts));
    w.kv_u32("llama.expert_used_count", static_cast<uint32_t>(top_k));
  }

  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0.0f, 0.0f, 0.0f};
  std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.emplace_back(name), scores.push_back(0.0f), types.push_back(6);  // byte
  }
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < vocab; ++i) {
    tokens.push_back("\xe2\x96\x81t" + std::to_string(i));
    scores.push_back(-static_cast<float>(i)), types.push_back(1);  // normal
  }
  w.kv_llama_vocab(tokens, scores, types);
  w.kv_bool("tokenizer.ggml.add_bos_token", true);

  uint32_t seed = 1;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, DType t) {
    w.tensor(name, {cols, rows}, ggml_type(t), random_tensor(t, rows, cols, seed++));
  };
  // experts stacked matrices [rows, cols] of one type: ggml dims {cols, rows, experts}.
  auto stacked = [&](const std::string& name, int64_t rows, int64_t cols, DType t) {
    std::string bytes;
    for (int64_t e = 0; e < experts; ++e) bytes += random_tensor(t, rows, cols, seed++);
    w.tensor(name, {cols, rows, experts}, ggml_type(t), bytes);
  };
  auto norm = [&](const std::string& name) {
    w.tensor(name, {hidden}, 0, GgufWriter::f32_bytes(std::vector<float>(static_cast<size_t>(hidden), 1.0f)));
  };
  auto more_bits = [&](int64_t i) {
    return i < layers / 8 || i >= 7 * layers / 8 || (i - layers / 8) % 3 == 2;
  };

  matrix("token_embd.weight", vocab, hidden, base);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const DType wide = q4km && more_bits(l) ? DType::Q6_K : base;
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", hidden, hidden, base);
    matrix(p + "attn_k.weight", kv_dim, hidden, base);
    matrix(p + "attn_v.weight", kv_dim, hidden, wide);
    matrix(p + "attn_output.weight", hidden, hidden, base);
    norm(p + "ffn_norm.weight");
    if (experts > 0) {
      matrix(p + "ffn_gate_inp.weight", experts, hidden, DType::F32);
      stacked(p + "ffn_gate_exps.weight", ffn, hidden, base);
      stacked(p + "ffn_up_exps.weight", ffn, hidden, base);
      stacked(p + "ffn_down_exps.weight", hidden, ffn, wide);
      continue;
    }
    matrix(p + "ffn_gate.weight", ffn, hidden, base);
    matrix(p + "ffn_up.weight", ffn, hidden, base);
    matrix(p + "ffn_down.weight", hidden, ffn, wide);
  }
  norm("output_norm.weight");
  matrix("output.weight", vocab, hidden, q4km ? DType::Q6_K : base);
  w.write(out);
  std::printf("wrote %s (%s, hidden %lld, ffn %lld, %lld layers, vocab %lld, experts %lld top-%lld)\n", out.c_str(),
              mix.c_str(), static_cast<long long>(hidden), static_cast<long long>(ffn), static_cast<long long>(layers),
              static_cast<long long>(vocab), static_cast<long long>(experts), static_cast<long long>(top_k));
  return 0;
}
