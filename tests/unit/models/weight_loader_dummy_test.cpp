// Dummy weights made by the backend (Backend::dummy_weight, the path --load-format dummy takes)
// equal the host-generated ones (WeightSource::read_into, the path every other source takes) for
// each shape of linear weight a model loads: merged column-parallel parts, a fused tensor's row
// range, a row-parallel column shard, a replicated table. A backend without a generator falls back
// to the host values.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/loader/gguf_model.h"
#include "models/layers/weight_loader.h"
#include "models/registry/registry.h"

namespace cypris {
namespace {

class CountingCpuBackend : public CpuBackend {
 public:
  explicit CountingCpuBackend(bool generate) : CpuBackend(2), generate_(generate) {}
  std::optional<DeviceTensor> dummy_weight(DType dtype, const std::vector<int64_t>& shape,
                                           const std::vector<DummyFill>& runs) override {
    ++dummy_calls;
    return generate_ ? CpuBackend::dummy_weight(dtype, shape, runs) : std::nullopt;
  }
  DeviceTensor upload_weight(HostTensor&& host) override {
    ++uploads;
    return CpuBackend::upload_weight(std::move(host));
  }
  int dummy_calls = 0;
  int uploads = 0;

 private:
  bool generate_;
};

struct Case {
  const char* what;
  std::vector<LinearPart> parts;
  int64_t cols;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  // q, k, v of rank 1 of 2, stacked.
  out.push_back({"merged qkv, rank 1 of 2",
                 {{"model.layers.0.self_attn.q_proj.weight", 8, ShardSpec::split(0, 1, 2)},
                  {"model.layers.0.self_attn.k_proj.weight", 4, ShardSpec::split(0, 1, 2)},
                  {"model.layers.0.self_attn.v_proj.weight", 4, ShardSpec::split(0, 1, 2)}},
                 16});
  // Rows [8, 12) of a fused [16, 16] tensor, rank 1 of 2 of them; then the whole first half.
  LinearPart fused{"model.layers.0.self_attn.qkv_proj.weight", 16, ShardSpec::split(0, 1, 2), 8, 4};
  LinearPart head{"model.layers.0.self_attn.qkv_proj.weight", 16, ShardSpec::replicated(), 0, 8};
  out.push_back({"fused row ranges", {fused, head}, 16});
  out.push_back(
      {"row-parallel, rank 1 of 4", {{"model.layers.0.mlp.down_proj.weight", 6, ShardSpec::split(1, 1, 4)}}, 32});
  out.push_back({"replicated", {{"lm_head.weight", 40, ShardSpec::replicated()}}, 24});
  return out;
}

TEST(WeightLoaderDummy, BackendGeneratedWeightsEqualTheHostValues) {
  auto source = make_dummy_weight_source(9);
  ModelConfig cfg;
  cfg.architectures = {"LlamaForCausalLM"};
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    ModelBuildOptions opt;
    opt.weight_dtype = dtype;
    CountingCpuBackend generating(true);
    WeightLoader w(cfg, *source, generating, opt);
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(c.what) + " " + std::string(dtype_name(dtype)));
      const int calls = generating.dummy_calls;
      DeviceTensor dev = w.load_linear(c.parts, c.cols);
      HostTensor host = w.load_linear_host(c.parts, c.cols);
      EXPECT_EQ(generating.dummy_calls, calls + 1);
      EXPECT_EQ(dev.view.dtype, host.dtype);
      ASSERT_EQ(dev.view.shape, host.shape);
      EXPECT_EQ(std::memcmp(dev.view.data, host.buffer.data(), dev.view.nbytes()), 0);
    }
    EXPECT_EQ(generating.uploads, 0) << "dummy linear weights went through upload_weight";

    DeviceTensor table = w.load_replicated("model.embed_tokens.weight", {50, 24}, dtype);
    HostTensor host_table = source->load("model.embed_tokens.weight", {50, 24}, dtype);
    ASSERT_EQ(table.view.shape, host_table.shape);
    EXPECT_EQ(std::memcmp(table.view.data, host_table.buffer.data(), table.view.nbytes()), 0);

    // No generator: the same values, uploaded from the host.
    CountingCpuBackend plain(false);
    WeightLoader wp(cfg, *source, plain, opt);
    for (const Case& c : cases()) {
      DeviceTensor a = wp.load_linear(c.parts, c.cols);
      DeviceTensor b = w.load_linear(c.parts, c.cols);
      ASSERT_EQ(a.view.shape, b.view.shape) << c.what;
      EXPECT_EQ(std::memcmp(a.view.data, b.view.data, a.view.nbytes()), 0) << c.what;
    }
    EXPECT_EQ(plain.uploads, static_cast<int>(cases().size()));
  }
}

// A llama.cpp Q4_K_M file keeps attn_v in Q6_K in some layers beside Q4_K q and k: the stacked
// q/k/v weight is then stored as two runs, each in its own quantized type (not dequantized to
// --dtype), with the rows in the same order.
TEST(WeightLoaderGguf, MergedPartsOfDifferentQuantTypesStayQuantized) {
  auto model = std::make_shared<const GgufModel>(std::filesystem::path(CYPRIS_TESTDATA_DIR) / "gguf" /
                                                 "tiny-random-Q4_K_M.gguf");
  const ModelConfig cfg = gguf_model_config(model_families(), *model);
  auto source = make_gguf_weight_source(model_families(), model);
  ModelBuildOptions opt;
  opt.weight_dtype = DType::F16;
  CpuBackend backend(1);
  WeightLoader w(cfg, *source, backend, opt);
  const int64_t h = cfg.hidden_size, kv = cfg.num_key_value_heads * cfg.head_dim;
  auto qkv = [&](int layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
    return std::vector<LinearPart>{{p + "q_proj.weight", h, ShardSpec::replicated()},
                                   {p + "k_proj.weight", kv, ShardSpec::replicated()},
                                   {p + "v_proj.weight", kv, ShardSpec::replicated()}};
  };
  EXPECT_EQ(w.same_dtype_runs(qkv(0), h).size(), 1u);  // all Q4_K
  const auto runs = w.same_dtype_runs(qkv(1), h);       // v in Q6_K
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_EQ(runs[0].size(), 2u);
  EXPECT_EQ(runs[1][0].name, qkv(1)[2].name);
  DeviceTensor qk = w.load_linear(runs[0], h), v = w.load_linear(runs[1], h);
  EXPECT_EQ(qk.view.dtype, DType::Q4_K);
  EXPECT_EQ(qk.view.shape, (std::vector<int64_t>{h + kv, h}));
  EXPECT_EQ(v.view.dtype, DType::Q6_K);
  // Mixed plain and quantized parts (or a split of the row) keep the one-run behaviour.
  EXPECT_EQ(w.same_dtype_runs({{"model.layers.1.mlp.down_proj.weight", h, ShardSpec::split(1, 0, 2)}}, 2 * h).size(),
            1u);
}

}  // namespace
}  // namespace cypris
