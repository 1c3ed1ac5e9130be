// A bounded, seeded random-mutation fuzz of the GGUF reader over the testdata files: each run
// flips bytes, writes extreme integers over fields, or cuts the file, then reads it all the way a
// model load does (metadata, config, tokenizer, a few tensors). Every outcome must be success or a
// cypris::Error; anything else (another exception, a crash under the sanitizers) fails the test.
// The fixed seed and count make it repeatable and a few seconds long; the counts are printed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/common/error.h"
#include "engine/loader/gguf.h"
#include "engine/loader/gguf_model.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "models/registry/registry.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Reads the file the way loading does; returns normally or throws Error.
void exercise(const std::string& bytes) {
  auto model = std::make_shared<GgufModel>(std::make_unique<GgufFile>("fuzz.gguf", bytes.data(), bytes.size()));
  (void)gguf_type_mix(*model);
  ModelConfig cfg;
  bool have_cfg = false;
  try {
    cfg = gguf_model_config(model_families(), *model);
    have_cfg = true;
  } catch (const Error&) {
  }
  try {
    auto tok = load_gguf_tokenizer(*model);
    (void)tok->encode("Once upon a time, there was a little girl.", true);
  } catch (const Error&) {
  }
  if (!have_cfg) return;
  auto w = make_gguf_weight_source(model_families(), model);
  for (const std::string name : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"}) {
    if (!w->contains(name)) continue;
    const auto native = w->native_dtype(name);
    const int64_t rows = name.find("embed") != std::string::npos ? cfg.vocab_size
                                                                   : int64_t{cfg.num_attention_heads} * cfg.head_dim;
    if (rows * cfg.hidden_size > (int64_t{1} << 22)) continue;  // keep runs small
    try {
      (void)w->load(name, {rows, cfg.hidden_size}, native && dtype_is_quantized(*native) ? *native : DType::F32);
    } catch (const Error&) {
    }
  }
}

TEST(GgufFuzz, RandomMutationsGiveErrorsNeverCrashes) {
  const fs::path dir = fs::path(CYPRIS_TESTDATA_DIR) / "gguf";
  // The smallest files of each kind: F32, Q8_0, Q4_0 with mixed F16; Q4_K_M with K-quants.
  const char* files[] = {"stories260k-Q4_0.gguf", "stories260k-Q8_0.gguf", "tiny-random-Q4_K_M.gguf"};
  constexpr int kRunsPerFile = 700;
  std::mt19937_64 rng(20261125);
  int executions = 0, accepted = 0, rejected = 0;
  for (const char* f : files) {
    const std::string original = read_file(dir / f);
    ASSERT_FALSE(original.empty()) << f;
    // Mutations aim at the header, metadata and tensor infos (where the parser decides sizes);
    // the data section is plain numbers to it.
    const size_t header_end = GgufFile("probe", original.data(), original.size()).data_offset();
    for (int run = 0; run < kRunsPerFile; ++run) {
      std::string b = original;
      const int kind = static_cast<int>(rng() % 8);
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const size_t at = rng() % header_end;
        if (kind <= 3) {
          b[at] = static_cast<char>(rng());  // a random byte
        } else if (kind <= 5 && at + 8 <= b.size()) {
          // An extreme 64-bit value (counts, lengths, offsets, dims): 0, -1, 2^k, 2^k +- 1.
          static const uint64_t kExtreme[] = {0, ~0ull, 1ull << 63, 1ull << 32, 1ull << 31, 0xffffffffull, 1, 2, 4,
                                              (1ull << 62) + 1};
          const uint64_t v = kExtreme[rng() % std::size(kExtreme)];
          std::memcpy(b.data() + at, &v, 8);
        } else if (kind == 6 && at + 4 <= b.size()) {
          const uint32_t v = static_cast<uint32_t>(rng() % 40);  // a type id, in and out of range
          std::memcpy(b.data() + at, &v, 4);
        } else {
          b.resize(std::min(b.size(), at + 1));  // cut
        }
      }
      ++executions;
      try {
        exercise(b);
        ++accepted;
      } catch (const Error&) {
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << f << " run " << run << ": not a cypris::Error: " << e.what();
      }
    }
  }
  std::printf("[ fuzz ] GGUF: %d executions, %d accepted, %d rejected with an Error, 0 crashes\n", executions, accepted,
              rejected);
  EXPECT_EQ(executions, 3 * kRunsPerFile);
  EXPECT_GT(rejected, executions / 4);  // the mutations do reach the checks
}

}  // namespace
}  // namespace cypris
