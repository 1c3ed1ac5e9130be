// The model side of --cpu-offload-gb (engine/backend/layer_weight_hooks.h), on the CPU: a backend
// that streams its offloaded layers as the CUDA backend does (weight_streamer.h) — each offloaded
// layer's bytes kept aside, its tensors pointing into one of two shared staging slots, copied in by
// before_layer() — with both slots poisoned (NaN) at the start of every forward pass. The logits must
// equal a plain CPU backend's bit for bit: any weight of layer i uploaded outside weights_of_layer(i),
// or any layer whose ops ran before its before_layer(), reads another layer's or poisoned bytes.
// Also the runtime's estimate of each layer's bytes, which sizes the slots, against what was loaded.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/layer_weight_hooks.h"
#include "engine/backend/weight_offload_plan.h"
#include "engine/loader/model_config.h"
#include "engine/loader/weights.h"
#include "engine/runtime/batch_upload.h"
#include "engine/runtime/layer_weight_bytes.h"
#include "engine/scheduler/batch_context.h"
#include "models/registry/registry.h"

namespace cypris {
namespace {

const std::string kFixtures = std::string(CYPRIS_FIXTURES_DIR) + "/models/";
const std::string kTestdata = std::string(CYPRIS_TESTDATA_DIR);

class StreamingCpuBackend : public CpuBackend, public LayerWeightHooks {
 public:
  StreamingCpuBackend(const WeightOffloadPlan& plan) : CpuBackend(1), plan_(plan) {
    capacity_ = static_cast<size_t>(plan.slot_capacity());
    for (int s = 0; s < plan.staging_slots(); ++s) slots_.emplace_back(capacity_);
    copies_.resize(static_cast<size_t>(std::max(0, plan.num_layers())));
    used_.assign(copies_.size(), 0);
  }

  DeviceTensor upload_weight(HostTensor&& host) override {
    const size_t bytes = host.view().nbytes();
    loaded_bytes_[loading_] += static_cast<int64_t>(bytes);
    if (!plan_.offloaded(loading_)) return CpuBackend::upload_weight(std::move(host));
    const size_t k = static_cast<size_t>(loading_ - plan_.first_layer);
    const size_t off = (used_[k] + 255) / 256 * 256;
    if (off + bytes > capacity_) {  // the estimate was short: stays resident, as on CUDA
      overflow_ += static_cast<int64_t>(bytes);
      return CpuBackend::upload_weight(std::move(host));
    }
    char* dst = slots_[static_cast<size_t>(slot_of(loading_))].data() + off;
    used_[k] = off + bytes;
    Tensor view(dst, host.dtype, host.shape);
    copies_[k].push_back({dst, std::move(host.buffer), bytes});
    return DeviceTensor{view, nullptr};
  }
  std::optional<DeviceTensor> dummy_weight(DType dtype, const std::vector<int64_t>& shape,
                                           const std::vector<DummyFill>& runs) override {
    if (plan_.offloaded(loading_)) return std::nullopt;
    return CpuBackend::dummy_weight(dtype, shape, runs);
  }

  void weights_of_layer(int layer) override { loading_ = layer; }
  void begin_layers() override {
    for (std::vector<char>& s : slots_) std::memset(s.data(), 0xFF, s.size());  // NaN in every float type
    calls_.push_back(-1);
  }
  void before_layer(int layer) override {
    calls_.push_back(layer);
    if (!plan_.offloaded(layer)) return;
    for (Copy& c : copies_[static_cast<size_t>(layer - plan_.first_layer)]) std::memcpy(c.dst, c.src.data(), c.bytes);
  }
  WeightOffloadStats weight_offload_stats() const override { return {}; }

  std::map<int, int64_t> loaded_bytes_;  // per layer (-1: outside the layers)
  std::vector<int> calls_;               // -1: begin_layers, else before_layer(i)
  int64_t overflow_ = 0;

 private:
  struct Copy {
    char* dst;
    Buffer src;
    size_t bytes;
  };
  int slot_of(int layer) const { return (layer - plan_.first_layer) % 2; }
  WeightOffloadPlan plan_;
  size_t capacity_ = 0;
  std::vector<std::vector<char>> slots_;
  std::vector<std::vector<Copy>> copies_;
  std::vector<size_t> used_;
  int loading_ = -1;
};

// Logits of every position of one prefill of `ids`, through the model's own forward.
std::vector<float> prefill_logits(Model& model, Backend& be, const std::vector<int32_t>& ids) {
  const int block_size = 16;
  std::vector<int32_t> all_rows(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) all_rows[i] = static_cast<int32_t>(i);
  BatchContext b = make_single_sequence_batch(ids, 0, block_size);
  b.logits_indices = all_rows;
  const int64_t n = b.num_tokens();
  const int64_t blocks = (n + block_size - 1) / block_size;
  std::vector<KvCacheLayer> kv(static_cast<size_t>(model.num_layers()));
  for (KvCacheLayer& l : kv) {
    l.k = be.zeros(DType::F32, {blocks + 1, block_size, model.num_kv_heads(), model.head_dim()});
    l.v = be.zeros(DType::F32, {blocks + 1, block_size, model.num_kv_heads(), model.head_dim()});
  }
  BatchUpload upload(be, b);
  DeviceTensor logits = model.forward(upload.in, kv);
  const float* p = static_cast<const float*>(logits.view.data);
  return std::vector<float>(p, p + logits.view.numel());
}

struct Case {
  std::string path;
  std::string dtype;  // --dtype of the weights
};

// Every fixture family (Llama, Qwen, Gemma, Cohere, Phi-3, MoE, ...) and a Q8_0 GGUF file.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& e : std::filesystem::directory_iterator(kFixtures)) {
    if (std::filesystem::exists(e.path() / "config.json")) out.push_back({e.path().string(), "float32"});
  }
  std::sort(out.begin(), out.end(), [](const Case& a, const Case& b) { return a.path < b.path; });
  for (const char* q : {"gptq_w4_g128_v1", "gptq_w4_g32_mixtral", "awq_w4_g64_qwen2_moe", "fp8_block128_dynamic",
                        "bnb_nf4", "ct_w8a8_channel_dynamic"}) {
    out.push_back({std::string(CYPRIS_FIXTURES_DIR) + "/quant/" + q, "auto"});
  }
  for (const char* g : {"tiny-random-Q4_K_M.gguf", "tiny-random-Q2_K.gguf"}) out.push_back({kTestdata + "/gguf/" + g, "auto"});
  out.push_back({kTestdata + "/gguf/stories260k-Q8_0.gguf", "auto"});
  out.push_back({kTestdata + "/models/stories260k", "bfloat16"});
  return out;
}

TEST(LayerWeightHooks, StreamedLayersGiveTheLogitsOfResidentOnes) {
  int checked = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.path);
    LoadOptions lo;
    lo.dtype = c.dtype;
    const ModelConfig cfg = load_model_config(model_families(), c.path, lo.overrides);
    auto weights = open_weight_source(model_families(), c.path, cfg, lo);
    ModelBuildOptions opt;
    opt.weight_dtype = resolve_dtype(c.dtype, cfg.torch_dtype);
    const int layers = cfg.num_hidden_layers;
    const std::vector<int64_t> estimate =
        estimate_layer_weight_bytes(cfg, *weights, opt.weight_dtype, 1, 0, layers);
    ASSERT_EQ(estimate.size(), static_cast<size_t>(layers));

    CpuBackend plain(1);
    auto reference_model = build_model(cfg, *weights, plain, opt);
    std::vector<int32_t> ids;
    for (int i = 0; i < 12; ++i) ids.push_back(static_cast<int32_t>((7 * i + 3) % std::min<int64_t>(cfg.vocab_size, 200)));
    const std::vector<float> reference = prefill_logits(*reference_model, plain, ids);

    // One layer (the last), all but the first, and all of them.
    const double one_byte = 1.0 / (1024.0 * 1024.0 * 1024.0);
    int64_t all_but_first = 0;
    for (int i = 1; i < layers; ++i) all_but_first += estimate[static_cast<size_t>(i)];
    for (double gib : {one_byte, static_cast<double>(all_but_first) * one_byte, 1e6}) {
      if (gib == 0) continue;  // a one-layer model has no "all but the first"
      const WeightOffloadPlan plan = plan_weight_offload(gib, estimate);
      ASSERT_FALSE(plan.empty());
      StreamingCpuBackend streaming(plan);
      auto model = build_model(cfg, *weights, streaming, opt);
      // The runtime's estimate covers what each layer loaded, so the slots hold them (a short
      // estimate would keep weights resident: correct, but less offloaded than planned).
      for (int i = 0; i < layers; ++i) {
        const int64_t got = streaming.loaded_bytes_[i];
        EXPECT_GT(got, 0) << "layer " << i;
        EXPECT_GE(estimate[static_cast<size_t>(i)], got) << "layer " << i;
        EXPECT_LE(estimate[static_cast<size_t>(i)], got + got / 4 + 4096) << "layer " << i;
      }
      EXPECT_EQ(streaming.overflow_, 0);
      EXPECT_GT(streaming.loaded_bytes_[-1], 0);  // the embedding (and head) outside the layers
      const std::vector<float> got = prefill_logits(*model, streaming, ids);
      ASSERT_EQ(got.size(), reference.size());
      EXPECT_EQ(std::memcmp(got.data(), reference.data(), got.size() * sizeof(float)), 0)
          << plan.num_layers() << " layers streamed";
      std::vector<int> want = {-1};
      for (int i = 0; i < layers; ++i) want.push_back(i);
      EXPECT_EQ(streaming.calls_, want);
      ++checked;
    }
  }
  EXPECT_GE(checked, 3 * 20);
}

TEST(LayerWeightHooks, APipelineStageStreamsItsOwnLayers) {
  // --gpu-layers N: the GPU stage holds layers [0, N) and offloads the last of those.
  const std::string dir = kFixtures + "llama_gqa_tied";
  const ModelConfig cfg = load_model_config(model_families(), dir);
  auto weights = open_weight_source(model_families(), dir, cfg, LoadOptions{});
  ASSERT_GE(cfg.num_hidden_layers, 2);
  ModelBuildOptions opt;
  opt.weight_dtype = DType::F32;
  opt.last_layer = 1;  // the first stage: layer 0 only
  const std::vector<int64_t> estimate = estimate_layer_weight_bytes(cfg, *weights, DType::F32, 1, 0, 1);
  const WeightOffloadPlan plan = plan_weight_offload(1e6, estimate, 0);
  EXPECT_EQ(plan.first_layer, 0);
  EXPECT_EQ(plan.end_layer, 1);
  StreamingCpuBackend streaming(plan);
  auto model = build_model(cfg, *weights, streaming, opt);
  EXPECT_GT(streaming.loaded_bytes_[0], 0);
  EXPECT_EQ(streaming.loaded_bytes_.count(1), 0u);  // the other stage's layer is not loaded here
}

}  // namespace
}  // namespace cypris
