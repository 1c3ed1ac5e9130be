// The CPU backend's sampling op (Backend::sample_rows, what the runtime calls for the sampling fast
// path) on logits that are a column slice of a wider buffer: the same tokens, logprobs and top-N as
// sample_rows_cpu on the compact rows, and too few logits rows is an Error naming sampling.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/common/error.h"
#include "kernels/cpu/sampling.h"

namespace cypris {
namespace {

TEST(CpuBackendSampling, StridedLogitsGiveTheCompactRowsResults) {
  constexpr int32_t kRows = 9, kVocab = 301, kPad = 13, kTop = 4;
  const int64_t ld = kVocab + kPad;
  std::mt19937 g(5);
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::vector<float> wide(static_cast<size_t>(kRows * ld), NAN), compact(static_cast<size_t>(kRows * kVocab));
  for (int32_t r = 0; r < kRows; ++r) {
    for (int32_t i = 0; i < kVocab; ++i) compact[r * kVocab + i] = wide[r * ld + i] = n(g);
    for (int32_t i = kVocab; i < ld; ++i) wide[r * ld + i] = 1e6f;  // would win every draw if read
  }
  std::vector<SamplingRowParams> params(kRows);
  for (int32_t r = 0; r < kRows; ++r) {
    params[r].temperature = r % 3 == 0 ? 0.0f : 0.8f;
    params[r].top_p = r % 2 ? 0.9f : 1.0f;
    params[r].top_k = r % 4 == 1 ? 20 : 0;
    params[r].num_top_logprobs = r % kTop;
    params[r].want_rank = 1;
    params[r].seed = 1000 + r;
    params[r].position = r;
  }
  SamplingBatch batch;
  batch.rows = kRows;
  batch.params = params.data();
  batch.max_top = kTop;
  struct Out {
    std::vector<int32_t> tokens = std::vector<int32_t>(kRows, -1), ranks = std::vector<int32_t>(kRows, -1),
                         top_ids = std::vector<int32_t>(kRows * kTop, -9);
    std::vector<float> logprobs = std::vector<float>(kRows, NAN), top_lp = std::vector<float>(kRows * kTop, NAN);
    SamplingResults view() { return {tokens.data(), logprobs.data(), ranks.data(), top_ids.data(), top_lp.data()}; }
  } got, want;

  CpuBackend cpu;
  Tensor logits(wide.data(), DType::F32, {kRows, kVocab}, Device::Cpu);
  logits.strides = {ld, 1};
  cpu.sample_rows(logits, batch, got.view());

  SamplingBatch compact_batch = batch;
  compact_batch.logits = compact.data();
  compact_batch.ld = kVocab;
  compact_batch.vocab = kVocab;
  sample_rows_cpu(compact_batch, want.view());

  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.ranks, want.ranks);
  EXPECT_EQ(got.top_ids, want.top_ids);
  for (int32_t r = 0; r < kRows; ++r) {
    EXPECT_LT(got.tokens[r], kVocab);
    EXPECT_FLOAT_EQ(got.logprobs[r], want.logprobs[r]) << "row " << r;
  }

  Tensor short_logits(wide.data(), DType::F32, {kRows - 1, kVocab}, Device::Cpu);
  short_logits.strides = {ld, 1};
  try {
    cpu.sample_rows(short_logits, batch, got.view());
    FAIL() << "8 logits rows accepted for 9 sampling rows";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("sampling"));
  }
}

}  // namespace
}  // namespace cypris
