// gather_columns on the CPU backend (the activation gather of layers kept over reordered input
// columns): out[t, j] = x[t, cols[j]] for a permutation and for a segment's partial list, from a
// column slice of a wider x into a column slice of a wider out; mis-shaped arguments are errors.
#include "engine/backend/gather_columns.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "engine/backend/cpu/cpu_backend.h"
#include "tests/support/error_of.h"

namespace cypris {
namespace {

TEST(GatherColumns, PicksTheListedColumnsOfEveryRow) {
  CpuBackend be(1);
  const int64_t t = 3, k = 40, wide = 50;
  std::vector<float> xs(static_cast<size_t>(t * wide));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);
  DeviceTensor xw = be.upload(xs.data(), DType::F32, {t, wide});
  const Tensor x = column_slice(xw.view, 5, k);  // columns 5..44 of each row
  std::vector<int32_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  for (int64_t n : {k, int64_t{16}}) {
    DeviceTensor cols = be.upload(perm.data(), DType::I32, {n});
    DeviceTensor ow = be.zeros(DType::F32, {t, n + 2});
    Tensor out = column_slice(ow.view, 1, n);
    gather_columns(be, x, cols.view, out);
    const float* o = ow.view.as<float>();
    for (int64_t r = 0; r < t; ++r) {
      EXPECT_EQ(o[r * (n + 2)], 0.0f);  // outside the slice: untouched
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(o[r * (n + 2) + 1 + j], xs[static_cast<size_t>(r * wide + 5 + perm[static_cast<size_t>(j)])])
            << "row " << r << " column " << j;
      }
    }
  }
}

TEST(GatherColumns, MisShapedArgumentsAreErrors) {
  CpuBackend be(1);
  DeviceTensor x = be.zeros(DType::F32, {2, 8});
  std::vector<int32_t> c = {0, 1, 2};
  DeviceTensor cols = be.upload(c.data(), DType::I32, {3});
  DeviceTensor wrong = be.zeros(DType::F32, {2, 4});
  EXPECT_THAT(test::error_of([&] { gather_columns(be, x.view, cols.view, wrong.view); }),
              ::testing::HasSubstr("gather_columns"));
  DeviceTensor fcols = be.zeros(DType::F32, {3});
  DeviceTensor out = be.zeros(DType::F32, {2, 3});
  EXPECT_THAT(test::error_of([&] { gather_columns(be, x.view, fcols.view, out.view); }),
              ::testing::HasSubstr("cols I32"));
}

}  // namespace
}  // namespace cypris
