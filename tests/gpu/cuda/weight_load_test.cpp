// Weights on the GPU without host round trips.
// Dummy weights generated on the GPU (CudaBackend::dummy_weight, kernels/cuda/dummy_fill.cu) equal
// the CPU's (CpuBackend::dummy_weight, kernels/cpu/dummy_fill.cpp) bit for bit, for every weight
// dtype, for contiguous and strided runs, and for a tensor big enough that the kernel's grid
// strides. The output is poisoned first, and the elements outside the runs must keep the poison.
// Uploads through the pinned double buffers (PinnedStaging) arrive intact, chunk seams and a
// partial last chunk included. Skips itself without a GPU. Written without a GPU: it has never run.
#include <gtest/gtest.h>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/pinned_staging.h"
#include "kernels/cuda/dummy_fill.h"
#endif

namespace cypris {
namespace {

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaDummyFill)
#ifdef CYPRIS_HAVE_CUDA

std::vector<uint8_t> download_bytes(Backend& b, const DeviceTensor& t) {
  std::vector<uint8_t> out(t.view.nbytes());
  b.download(t.view, out.data());
  return out;
}

TEST(CudaDummyFill, DeviceWeightsEqualTheCpuWeights) {
  CYPRIS_REQUIRE_GPU();
  CudaBackend gpu;
  CpuBackend cpu(4);
  const std::string name = "model.layers.1.mlp.gate_up_proj.weight";
  const int64_t rows = 300, cols = 4096 + 7;  // ~1.2M elements: more than one grid pass
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // Two parts stacked: rows [100, 250) of one tensor, then a column shard of another.
    DummyFill a;
    a.key = dummy_key(42, name.data(), name.size());
    a.scale = dummy_scale(2, cols);
    a.rows = 1;
    a.row_len = 150 * cols;
    a.src_offset = 100 * cols;
    a.src_row_stride = a.row_len;
    DummyFill b;
    b.key = dummy_key(42, "other", 5);
    b.scale = 0.02f;
    b.dst_offset = a.row_len;
    b.rows = 150;
    b.row_len = cols;
    b.src_offset = 3 * cols;
    b.src_row_stride = 4 * cols;  // every fourth row of a wider tensor: the strided kernel path
    const std::vector<DummyFill> runs = {a, b};
    auto want = cpu.dummy_weight(dtype, {rows, cols}, runs);
    auto got = gpu.dummy_weight(dtype, {rows, cols}, runs);
    ASSERT_TRUE(want && got);
    EXPECT_EQ(got->view.shape, want->view.shape);
    const auto g = download_bytes(gpu, *got);
    const auto w = download_bytes(cpu, *want);
    ASSERT_EQ(g.size(), w.size());
    size_t first_diff = g.size();
    for (size_t i = 0; i < g.size() && first_diff == g.size(); ++i) {
      if (g[i] != w[i]) first_diff = i;
    }
    EXPECT_EQ(first_diff, g.size()) << "first differing byte " << first_diff << " (element "
                                    << first_diff / dtype_size(dtype) << ")";
  }
}

TEST(CudaDummyFill, KernelWritesOnlyItsRun) {
  CYPRIS_REQUIRE_GPU();
  const int64_t n = 1000;
  gpu_test::DevBuf<float> d(n);
  d.poison();
  DummyFill run;
  run.key = dummy_key(1, "w", 1);
  run.scale = 0.5f;
  run.dst_offset = 10;
  run.rows = 7;
  run.row_len = 11;
  run.src_offset = 5;
  run.src_row_stride = 13;
  dummy_fill_cuda(d.get(), DType::F32, run, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = d.download();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = i - run.dst_offset;
    if (j < 0 || j >= run.rows * run.row_len) {
      EXPECT_TRUE(std::isnan(got[i])) << "wrote element " << i << " outside the run";
    } else {
      const int64_t r = j / run.row_len, c = j % run.row_len;
      EXPECT_EQ(got[i], dummy_value(run.key, run.scale, uint64_t(run.src_offset + r * run.src_row_stride + c))) << i;
    }
  }
}

TEST(CudaWeightUpload, PinnedDoubleBuffersCopyEveryByte) {
  CYPRIS_REQUIRE_GPU();
  // 5.5 chunks of 1 MiB: both buffers reused several times, then a partial chunk.
  const size_t bytes = (size_t{11} << 20) / 2 + 12345;
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  gpu_test::DevBuf<uint8_t> d(bytes);
  d.poison();
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  {
    PinnedStaging staging(size_t{1} << 20);
    staging.copy_to_device(d.get(), host.data(), bytes, stream);
    staging.copy_to_device(d.get(), host.data(), 7, stream);  // smaller than a chunk, same bytes
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_TRUE(d.download() == host);
  // Through the backend: upload_weight of a host tensor equals it.
  CudaBackend gpu;
  HostTensor w;
  w.dtype = DType::BF16;
  w.shape = {3, 900001};  // 5.4 MB of the bytes above
  w.buffer = Buffer(dtype_nbytes(w.dtype, 3 * 900001));
  std::memcpy(w.buffer.data(), host.data(), w.buffer.size());
  DeviceTensor t = gpu.upload_weight(std::move(w));
  std::vector<uint8_t> back(t.view.nbytes());
  gpu.download(t.view, back.data());
  EXPECT_EQ(std::memcmp(back.data(), host.data(), back.size()), 0);
}

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
