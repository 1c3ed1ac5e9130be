// CudaBackend::lora_linear (kernels/cuda/lora.cu, one launch per projection) against the CPU
// kernel (kernels/cpu/lora.h) on the same inputs: fp32 activations (normalised error < 1e-5) and
// bf16/fp16 ones (inputs rounded to 16 bits first, < 1e-2); rows of several adapters, of the base
// model (slot -1, which must keep the poisoned output as it was) and of a slot whose scale is 0;
// decode-sized and prefill-sized batches (the segmented GEMM from 64 rows), a column slice as
// output, ranks up to 256. And a whole
// model: the Llama fixture with three adapters and the base in one batch on the GPU equals the CPU.
// Skips itself without a GPU. Written without a GPU: never ran yet.
#include <gtest/gtest.h>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/loader/lora_adapter.h"
#include "engine/runtime/model_runner.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaLora)
#ifdef CYPRIS_HAVE_CUDA

struct Case {
  DType act;
  int64_t t, r, k, n, l;
  double tol;
  int64_t run = 1;  // rows per run of one slot: 1 mixes slots row by row, more is a prefill's layout
};

void check(const Case& c) {
  CudaBackendOptions o;
  o.activation_dtype = c.act;
  CudaBackend gpu(o);
  CpuBackend cpu(2);
  const int64_t wide = c.n + 8;  // out is columns [4, 4 + n) of a [t, n + 8] buffer
  // Inputs rounded to the activation dtype once, so both sides see the same values.
  const auto round = [&](const std::vector<float>& v) { return to_f32(store(v, c.act).bytes, c.act); };
  const std::vector<float> x = round(randn(c.t * c.k, 1)), a = round(randn(c.l * c.r * c.k, 2, 0.2f)),
                           b = round(randn(c.l * c.n * c.r, 3, 0.2f)), out0 = round(randn(c.t * wide, 4));
  std::vector<float> scales(static_cast<size_t>(c.l));
  for (int64_t s = 0; s < c.l; ++s) scales[size_t(s)] = 0.5f * static_cast<float>(s + 1);
  scales.back() = 0.0f;
  std::vector<int32_t> slots(static_cast<size_t>(c.t));
  for (int64_t i = 0; i < c.t; ++i) slots[size_t(i)] = static_cast<int32_t>(((i / c.run) * 7) % (c.l + 1)) - 1;

  auto run = [&](Backend& be, DType act) {
    auto up = [&](const std::vector<float>& v, std::vector<int64_t> shape) {
      const Stored st = store(v, act);
      return be.upload(st.bytes.data(), act, shape);
    };
    DeviceTensor xd = up(x, {c.t, c.k}), ad = up(a, {c.l, c.r, c.k}), bd = up(b, {c.l, c.n, c.r}),
                 od = up(out0, {c.t, wide});
    DeviceTensor sd = be.upload(slots.data(), DType::I32, {c.t});
    DeviceTensor scd = be.upload(scales.data(), DType::F32, {c.l});
    Tensor cols = column_slice(od.view, 4, c.n);
    be.lora_linear(xd.view, sd.view, ad.view, bd.view, scd.view, cols);
    std::vector<uint8_t> raw(od.view.nbytes());
    be.synchronize();
    be.download(od.view, raw.data());
    return to_f32(raw, act);
  };
  const std::vector<float> want = run(cpu, DType::F32);
  const std::vector<float> got = run(gpu, c.act);
  const std::string what = std::string(dtype_name(c.act)) + " t " + std::to_string(c.t) + " r " + std::to_string(c.r);
  EXPECT_LT(norm_err(got, want), c.tol) << what;
  const std::vector<float> before = to_f32(store(out0, c.act).bytes, c.act);
  for (int64_t i = 0; i < c.t; ++i) {
    for (int64_t col = 0; col < wide; ++col) {
      const bool untouched = col < 4 || col >= 4 + c.n || slots[size_t(i)] < 0 || slots[size_t(i)] == c.l - 1;
      if (untouched) ASSERT_EQ(got[size_t(i * wide + col)], before[size_t(i * wide + col)]) << what << " row " << i;
    }
  }
}

TEST(CudaLora, GroupedProductEqualsTheCpuKernel) {
  CYPRIS_REQUIRE_GPU();
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    const double tol = act == DType::F32 ? 1e-5 : 1e-2;
    check({act, 1, 8, 512, 300, 3, tol});
    check({act, 8, 16, 1024, 4096, 5, tol});
    check({act, 77, 64, 256, 520, 4, tol});
    check({act, 300, 4, 64, 70, 2, tol});
  }
}

// 64 rows and more take the segmented GEMM (shrink, then expand over tiles of 16 rows): runs of one
// adapter as a prefill lays them out (runs not aligned to the tiles, so tiles hold two adapters or
// an adapter and the base), row-by-row mixing, ranks up to 256, inputs and outputs not multiples of
// the kernel's chunks, a column slice as output.
TEST(CudaLora, SegmentedPrefillProductEqualsTheCpuKernel) {
  CYPRIS_REQUIRE_GPU();
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    const double tol = act == DType::F32 ? 1e-5 : 1e-2;
    check({act, 64, 8, 512, 300, 3, tol, 64});
    check({act, 200, 16, 1000, 4100, 4, tol, 37});
    check({act, 129, 64, 96, 70, 5, tol, 1});
    check({act, 333, 256, 130, 257, 2, tol, 50});
    check({act, 100, 4, 33, 65, 2, tol, 9});
  }
}

TEST(CudaLora, MixedBatchOfAdaptersEqualsTheCpuModel) {
  CYPRIS_REQUIRE_GPU();
  const std::string base = std::string(CYPRIS_FIXTURES_DIR) + "/models/llama_gqa_tied";
  const std::string lora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/llama_gqa_tied/";
  auto logits = [&](const std::string& device) {
    ModelRunnerOptions o;
    o.model_dir = base;
    o.load.dtype = "float32";
    o.device = device;
    o.threads = 2;
    o.num_blocks = 16;
    o.max_loras = 3;
    o.cuda_fp32_gemm = true;
    ModelRunner runner(o);
    int slot = 0;
    for (const char* a : {"qv_r4", "all_r8_rslora", "mlp_o_r2_bin"}) runner.load_lora(slot++, load_lora_adapter(lora + a, 16));
    std::vector<int32_t> ids = {1, 5, 9, 13, 17, 21, 25, 29};
    BatchContext b = make_single_sequence_batch(ids, 0, runner.block_size());
    b.lora_slots = {0, 1, 2, -1, 0, 1, 2, -1};  // per token: every row its own adapter
    b.logits_indices = {0, 1, 2, 3, 4, 5, 6, 7};
    return runner.execute(b).data;
  };
  EXPECT_LT(norm_err(logits("cuda"), logits("cpu")), 1e-4);
}

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
