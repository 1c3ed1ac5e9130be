// The column gather of layers kept over reordered input columns (act-order GPTQ, EXL2) on the GPU:
// the kernel against the CPU implementation on fresh random inputs (a permutation and a partial
// list of columns, 2- and 4-byte elements, strided rows, more rows than one grid dimension holds),
// with the output poisoned first; the copy is exact. Skips itself without a GPU. Written without a
// GPU: never ran on one.
#include <gtest/gtest.h>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include <numeric>

#include "kernels/cpu/gather_columns.h"
#include "kernels/cuda/gather_columns.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaGatherColumns)
#ifdef CYPRIS_HAVE_CUDA

template <typename T>
void expect_gather_matches_cpu(int64_t rows, int64_t cols, int64_t x_ld, int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<T> x(static_cast<size_t>(rows * x_ld));
  for (T& v : x) v = static_cast<T>(g());
  std::vector<int32_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g);
  perm.resize(static_cast<size_t>(n));
  const int64_t out_ld = n + 3;
  std::vector<T> want(static_cast<size_t>(rows * out_ld), T{0});
  gather_columns_cpu(x.data(), rows, x_ld, sizeof(T), perm.data(), n, want.data(), out_ld);
  DevBuf<T> dx(x);
  DevBuf<int32_t> dp(perm);
  DevBuf<T> dout(want.size());
  dout.poison();
  gather_columns_cuda(dx.get(), rows, cols, x_ld, sizeof(T), dp.get(), n, dout.get(), out_ld, nullptr);
  const std::vector<T> got = dout.download();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(got[static_cast<size_t>(r * out_ld + j)], want[static_cast<size_t>(r * out_ld + j)])
          << "row " << r << " column " << j;
    }
  }
}

TEST(CudaGatherColumns, MatchesTheCpuGather) {
  CYPRIS_REQUIRE_GPU();
  expect_gather_matches_cpu<uint32_t>(1, 4096, 4096, 4096, 1);      // decode, fp32, a whole permutation
  expect_gather_matches_cpu<uint16_t>(37, 11008, 11008, 11008, 2);  // prefill, 16-bit
  expect_gather_matches_cpu<uint16_t>(5, 256, 300, 96, 3);          // a segment of the columns, strided x
  expect_gather_matches_cpu<uint32_t>(70000, 64, 64, 32, 4);        // rows past one grid dimension
}

#endif

}  // namespace
}  // namespace cypris
