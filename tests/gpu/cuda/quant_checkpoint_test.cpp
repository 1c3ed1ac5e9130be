// GPTQ and AWQ checkpoints (tests/fixtures/quant) on the GPU: the layers stay in their repacked block
// types (CudaBackend's quantized GEMV and 16-bit tiles), and the prefill logits agree with the
// float64 reference of tests/tools/gen_quant_fixtures.py within the 16-bit-activation tolerance the
// GGUF models use (5e-2 of the largest logit).
// Skips itself without a GPU. Written without a GPU: never ran on one.
#include <gtest/gtest.h>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/runtime/model_runner.h"
#include "tests/support/reference_fixture.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaQuantCheckpoint)
#ifdef CYPRIS_HAVE_CUDA

class CudaQuantCheckpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaQuantCheckpoint, PrefillLogitsMatchTheFloat64Reference) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_FIXTURES_DIR) + "/quant/" + GetParam();
  std::ifstream in(dir + "/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str());
  const auto ids = j["input_ids"].get<std::vector<int32_t>>();
  const auto want = j["logits"].get<std::vector<std::vector<float>>>();
  ModelRunnerOptions o;
  o.model_dir = dir;
  o.device = "cuda";
  o.threads = 2;
  ModelRunner r(o);
  const Logits l = reference_fixture::full_prefill(r, ids);
  const std::vector<float> got = l.data;
  for (int64_t row = 0; row < static_cast<int64_t>(ids.size()); ++row) {
    EXPECT_LT(reference_fixture::rel_err(got.data() + row * l.vocab, want[row]), 5e-2) << GetParam() << " row " << row;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaQuantCheckpoint,
                         ::testing::Values("gptq_w4_g128_v1", "gptq_w8_g32_sym_v2", "gptq_w2_rowgroup_v1",
                                           "gptq_w4_g64_act_order", "awq_w4_g128", "awq_w4_g64", "ct_w4a16_g128_sym",
                                           "ct_w8a16_channel_asym", "fp8_tensor_static", "fp8_block128_dynamic",
                                           "ct_fp8_channel_dynamic", "ct_fp8_tensor_static", "ct_w8a8_channel_dynamic",
                                           "ct_w8a8_tensor_static_asym",
                                           // EXL2 at its bits in W4/W8 segments, act-order GPTQ over its
                                           // columns sorted by group; the activations gathered
                                           // (gather_columns_cuda) before each product: never ran on a GPU
                                           "exl2_mixed",
                                           // bitsandbytes 4-bit (never ran on a GPU)
                                           "bnb_nf4", "bnb_nf4_double_quant", "bnb_fp4_block128",
                                           // GPTQ/AWQ MoE experts and 3-bit GPTQ (never ran on a GPU)
                                           "gptq_w4_g32_mixtral", "gptq_w3_g32_v1", "awq_w4_g64_qwen2_moe",
                                           // groups of 64 as W4G64, bitsandbytes int8 as W8G128 (never ran on a GPU)
                                           "gptq_w4_g64_v1", "ct_w4a16_g64_asym", "bnb_int8",
                                           // Marlin-format GPTQ, unpacked at load into W4G128 (never ran on a GPU)
                                           "gptq_marlin_w4_g128"));

// A 16-bit checkpoint quantized at load (-q fp8, --load-in-8bit, --load-in-4bit) on the GPU, against
// the float64 forward over the reference quantization (tests/fixtures/quant/online_f16). Never ran on a GPU.
class CudaOnlineQuant : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaOnlineQuant, PrefillLogitsMatchTheReferenceQuantization) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_FIXTURES_DIR) + "/quant/online_f16";
  std::ifstream in(dir + "/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str());
  const auto ids = j["input_ids"].get<std::vector<int32_t>>();
  const auto want = j["online"][GetParam()]["logits"].get<std::vector<std::vector<float>>>();
  ModelRunnerOptions o;
  o.model_dir = dir;
  o.device = "cuda";
  o.threads = 2;
  if (GetParam() == "fp8") o.load.quantization = "fp8";
  o.load.load_in_8bit = GetParam() == "int8";
  o.load.load_in_4bit = GetParam() == "int4";
  ModelRunner r(o);
  const Logits l = reference_fixture::full_prefill(r, ids);
  for (int64_t row = 0; row < static_cast<int64_t>(ids.size()); ++row) {
    EXPECT_LT(reference_fixture::rel_err(l.data.data() + row * l.vocab, want[row]), 5e-2) << GetParam() << " row " << row;
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, CudaOnlineQuant, ::testing::Values("fp8", "int8", "int4"));

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
