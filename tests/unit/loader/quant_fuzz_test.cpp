// A bounded, seeded random-mutation fuzz of the quantized-checkpoint loader over the fixtures of
// tests/fixtures/quant: each run changes the tensors' shapes, dtypes or bytes (g_idx values,
// packed words), drops a tensor, or writes odd values into quantization_config, then reads every
// layer as a model load does (native block type and fp32). Every outcome must be success or a
// cypris::Error; anything else (another exception, a crash) fails the test. Fixed seed and count:
// repeatable, about a second.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/common/error.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"
#include "engine/loader/weights.h"
#include "tests/support/safetensors_edit.h"
#include "tests/support/temp_dir.h"
#include "models/registry/registry.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;

using Raw = testing_support::RawTensor;

// Writes the tensors with consistent offsets (the bytes of a tensor whose shape or dtype changed
// are resized to match, so that the file itself stays well formed and the loader's checks run).
void write_all(const fs::path& file, std::map<std::string, Raw> tensors) {
  for (auto& [name, t] : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const size_t es = t.dtype == "I64" ? 8 : (t.dtype == "F16" || t.dtype == "BF16") ? 2 : 4;
    t.bytes.resize(static_cast<size_t>(n) * es);
  }
  testing_support::write_tensors(file, tensors);
}

TEST(QuantFuzz, MutatedCheckpointsLoadOrFailCleanly) {
  const std::string root = std::string(CYPRIS_FIXTURES_DIR) + "/quant/";
  const std::vector<std::string> fixtures = {"gptq_w4_g128_v1", "gptq_w8_g32_sym_v2", "gptq_w4_g64_act_order",
                                             "awq_w4_g64", "ct_w8a16_channel_asym", "gptq_marlin_w4_g128"};
  std::mt19937 rng(20261127);
  test::TempDir dir("quant_fuzz");
  int ok = 0, errors = 0;
  for (int iter = 0; iter < 150; ++iter) {
    const std::string fixture = fixtures[rng() % fixtures.size()];
    for (const auto& e : fs::directory_iterator(dir.path())) fs::remove(e.path());
    for (const auto& e : fs::directory_iterator(root + fixture)) fs::copy(e.path(), dir.path() / e.path().filename());
    auto tensors = testing_support::read_tensors(root + fixture + "/model.safetensors");
    std::vector<std::string> names;
    for (const auto& [n, t] : tensors) names.push_back(n);
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) {
      Raw& t = tensors[names[rng() % names.size()]];
      switch (rng() % 6) {
        case 0:
          if (!t.shape.empty()) t.shape[rng() % t.shape.size()] = static_cast<int64_t>(rng() % 300);
          break;
        case 1:
          t.dtype = std::vector<std::string>{"I32", "F16", "BF16", "F32", "I64"}[rng() % 5];
          break;
        case 2:  // random words (g_idx values, packed values, scales: inf/nan included)
          for (int i = 0; i < 8 && !t.bytes.empty(); ++i) {
            const uint32_t v = rng();
            const size_t at = (rng() % t.bytes.size()) & ~size_t{3};
            std::memcpy(t.bytes.data() + at, &v, std::min<size_t>(4, t.bytes.size() - at));
          }
          break;
        case 3:
          tensors.erase(names[rng() % names.size()]);
          names.clear();
          for (const auto& [n, x] : tensors) names.push_back(n);
          break;
        case 4:
          t.shape.push_back(1);
          break;
        default: {
          const fs::path cfg = dir.path() / "config.json";
          nlohmann::json c = nlohmann::json::parse(std::ifstream(cfg));
          if (c.contains("quantization_config")) {
            auto& q = c["quantization_config"];
            const std::vector<nlohmann::json> odd = {0, -1, 3, 7, 16, 33, 96, 1 << 20, "x", nullptr, true, -128};
            const char* key =
                std::vector<const char*>{"bits", "group_size", "sym", "desc_act", "checkpoint_format"}[rng() % 5];
            q[key] = odd[rng() % odd.size()];
          }
          std::ofstream(cfg) << c.dump();
        }
      }
      if (names.empty()) break;
    }
    write_all(dir.path() / "model.safetensors", tensors);
    try {
      const ModelConfig cfg = load_model_config(model_families(), dir.path());
      const auto w = open_weight_source(model_families(), dir.path(), cfg, LoadOptions{});
      for (const char* layer : {"self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"}) {
        const std::string name = std::string("model.layers.0.") + layer + ".weight";
        const std::vector<int64_t> shape =
            std::string(layer) == "self_attn.k_proj" ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{128, 128};
        if (!w->contains(name)) continue;
        if (const auto native = w->native_dtype(name)) w->load(name, shape, *native);
        w->load(name, shape, DType::F32, ShardSpec::split(1, 1, 2));
      }
      ++ok;
    } catch (const Error&) {
      ++errors;
    }
  }
  std::printf("quant fuzz: %d loaded, %d clean errors\n", ok, errors);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace cypris
