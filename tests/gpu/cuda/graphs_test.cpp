// CUDA graphs for decode: the logits of decode batches replayed through graphs (padded to the
// next capture size) must equal the eager logits, step after step, on stories260k and every tiny
// fixture, also for speculative decoding's verify steps (one draft length, or mixed lengths padded
// to the longest) and with LoRA adapters on the rows; and the profiled KV sizing must leave room or
// say which flag to change. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/common/error.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/loader/lora_adapter.h"
#include "engine/runtime/model_runner.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaGraphs)
#ifdef CYPRIS_HAVE_CUDA

constexpr int kBlockSize = 16;
constexpr int kBlocksPerSeq = 8;  // contexts up to 128 tokens

ModelRunnerOptions options(const std::string& dir, bool eager) {
  ModelRunnerOptions o;
  o.model_dir = dir;
  o.load.dtype = "auto";
  o.device = "cuda";
  o.cuda_fp32_gemm = true;
  o.block_size = kBlockSize;
  o.num_blocks = 17 * kBlocksPerSeq;
  o.max_num_seqs = 17;  // capture sizes 1, 2, 4, 8, 16, 24
  o.enforce_eager = eager;
  o.max_seq_len_to_capture = 96;
  return o;
}

// Sequence s owns blocks [s * kBlocksPerSeq, (s + 1) * kBlocksPerSeq): block 0 belongs to
// sequence 0, so a padding row writing into it would show in later steps.
BatchContext decode_batch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& lens,
                          int blocks_per_seq = kBlocksPerSeq) {
  BatchContext b;
  b.max_blocks_per_seq = blocks_per_seq;
  b.query_start_loc.push_back(0);
  for (size_t s = 0; s < tokens.size(); ++s) {
    const int32_t pos = lens[s] - 1;
    b.token_ids.push_back(tokens[s]);
    b.positions.push_back(pos);
    b.slot_mapping.push_back(static_cast<int64_t>(s) * blocks_per_seq * kBlockSize + pos);
    b.query_start_loc.push_back(static_cast<int32_t>(s + 1));
    b.seq_lens.push_back(lens[s]);
    for (int k = 0; k < blocks_per_seq; ++k) b.block_tables.push_back(static_cast<int32_t>(s) * blocks_per_seq + k);
    b.logits_indices.push_back(static_cast<int32_t>(s));
  }
  return b;
}

// Prefills `n` sequences of different prompt lengths (eagerly, one batch each), then runs decode
// steps of all n together; returns the logits of every decode step. Prompts have base_len + 0..19
// tokens, fewer where the rotary table is short (the fixtures' 12 positions).
std::vector<std::vector<float> > run(ModelRunner& runner, int n, int steps, int blocks_per_seq = kBlocksPerSeq,
                                     int32_t base_len = 2) {
  const int64_t vocab = runner.config().vocab_size;
  std::vector<int32_t> next(n), lens(n);
  const int32_t span =
      static_cast<int32_t>(std::clamp<int64_t>(runner.config().max_model_len - steps - base_len, 1, 20));
  for (int s = 0; s < n; ++s) {
    const int32_t len = base_len + (s * 5) % span;
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < len; ++i) prompt.push_back(static_cast<int32_t>(1 + (s * 31 + i * 7) % (vocab - 1)));
    BatchContext b = make_single_sequence_batch(prompt, 0, kBlockSize);
    b.max_blocks_per_seq = blocks_per_seq;
    b.block_tables.clear();
    for (int k = 0; k < blocks_per_seq; ++k) b.block_tables.push_back(s * blocks_per_seq + k);
    for (auto& slot : b.slot_mapping) slot += static_cast<int64_t>(s) * blocks_per_seq * kBlockSize;
    const Logits l = runner.execute(b);
    next[s] = static_cast<int32_t>(std::max_element(l.row(0), l.row(0) + l.vocab) - l.row(0));
    lens[s] = len;
  }
  std::vector<std::vector<float> > out;
  for (int step = 0; step < steps; ++step) {
    for (int s = 0; s < n; ++s) ++lens[s];
    const Logits l = runner.execute(decode_batch(next, lens, blocks_per_seq));
    EXPECT_EQ(l.rows, n);
    out.push_back(l.data);
    for (int s = 0; s < n; ++s) {
      next[s] = static_cast<int32_t>(std::max_element(l.row(s), l.row(s) + l.vocab) - l.row(s));
    }
  }
  return out;
}

void expect_graph_logits_equal_eager(const std::string& dir) {
  ModelRunner eager(options(dir, true));
  ModelRunner graphs(options(dir, false));
  EXPECT_EQ(eager.num_cuda_graphs(), 0);
  // Mixture-of-experts models route on the host and run eagerly even when graphs are asked for.
  const bool moe = eager.config().num_experts > 0;
  ASSERT_EQ(graphs.num_cuda_graphs(), moe ? 0 : 6);
  for (int n : {1, 3, 8, 17}) {
    // Fresh sequences each round (prefill overwrites their blocks), three decode steps each.
    const auto want = run(eager, n, 3);
    const auto got = run(graphs, n, 3);
    ASSERT_EQ(got.size(), want.size());
    for (size_t step = 0; step < want.size(); ++step) {
      EXPECT_LT(norm_err(got[step], want[step]), 1e-5) << dir << " batch " << n << " step " << step;
    }
  }
}

// Speculative decoding's verify steps: every sequence with q new tokens (its last token and q - 1
// drafts), a logits row per token. Prefills n prompts, then runs `steps` such steps with made-up
// drafts; returns each step's logits.
std::vector<std::vector<float> > run_verify(ModelRunner& runner, int n, int q, int steps) {
  const int64_t vocab = runner.config().vocab_size;
  std::vector<int32_t> lens(n);
  for (int s = 0; s < n; ++s) {
    const int32_t len = 3 + (s * 5) % 17;
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < len; ++i) prompt.push_back(static_cast<int32_t>(1 + (s * 31 + i * 7) % (vocab - 1)));
    BatchContext b = make_single_sequence_batch(prompt, 0, kBlockSize);
    b.max_blocks_per_seq = kBlocksPerSeq;
    b.block_tables.clear();
    for (int k = 0; k < kBlocksPerSeq; ++k) b.block_tables.push_back(s * kBlocksPerSeq + k);
    for (auto& slot : b.slot_mapping) slot += static_cast<int64_t>(s) * kBlocksPerSeq * kBlockSize;
    runner.execute(b);
    lens[s] = len;
  }
  std::vector<std::vector<float> > out;
  for (int step = 0; step < steps; ++step) {
    BatchContext b;
    b.max_blocks_per_seq = kBlocksPerSeq;
    b.query_start_loc.push_back(0);
    for (int s = 0; s < n; ++s) {
      for (int t = 0; t < q; ++t) {
        const int32_t pos = lens[s] + t;
        b.token_ids.push_back(static_cast<int32_t>(1 + (s * 13 + step * 7 + t * 3) % (vocab - 1)));
        b.positions.push_back(pos);
        b.slot_mapping.push_back(static_cast<int64_t>(s) * kBlocksPerSeq * kBlockSize + pos);
        b.logits_indices.push_back(s * q + t);
      }
      lens[s] += q;
      b.query_start_loc.push_back((s + 1) * q);
      b.seq_lens.push_back(lens[s]);
      for (int k = 0; k < kBlocksPerSeq; ++k) b.block_tables.push_back(s * kBlocksPerSeq + k);
    }
    b.max_query_len = q;
    b.max_seq_len = *std::max_element(lens.begin(), lens.end());
    const Logits l = runner.execute(b);
    EXPECT_EQ(l.rows, n * q);
    out.push_back(l.data);
  }
  return out;
}

TEST(CudaGraphs, SpeculativeVerifyStepsOfKPlusOneTokensEqualEager) {
  // Graphs for 2..4 query tokens per sequence (k = 3) over batches of 1, 2, 4 and 8 sequences;
  // 9 sequences have none and run eagerly. Logits of every verified position equal eager ones.
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  ModelRunnerOptions eo = options(dir, true), go = options(dir, false);
  eo.graph_max_query_len = go.graph_max_query_len = 4;
  ModelRunner eager(eo);
  ModelRunner graphs(go);
  ASSERT_EQ(graphs.num_cuda_graphs(), 6 + 3 * 4);
  for (int q : {2, 4}) {
    for (int n : {1, 3, 8, 9}) {
      const auto want = run_verify(eager, n, q, 3);
      const auto got = run_verify(graphs, n, q, 3);
      ASSERT_EQ(got.size(), want.size());
      for (size_t step = 0; step < want.size(); ++step) {
        EXPECT_LT(norm_err(got[step], want[step]), 1e-5) << "q " << q << " batch " << n << " step " << step;
      }
    }
  }
  // Plain decodes still replay their own graphs after verify steps.
  const auto want = run(eager, 3, 3);
  const auto got = run(graphs, 3, 3);
  for (size_t step = 0; step < want.size(); ++step) EXPECT_LT(norm_err(got[step], want[step]), 1e-5);
}

// Verify steps whose sequences have different numbers of new tokens (the adaptive draft length, a
// sequence without drafts): step i gives sequence s qs[i][s] tokens. Returns each step's logits and
// checks that the batch is one a graph replays (the runner would otherwise run it eagerly).
std::vector<std::vector<float> > run_mixed_verify(ModelRunner& runner, const std::vector<std::vector<int> >& qs,
                                                  int max_query_len) {
  const int64_t vocab = runner.config().vocab_size;
  const int n = static_cast<int>(qs.front().size());
  std::vector<int32_t> lens(n);
  for (int s = 0; s < n; ++s) {
    const int32_t len = 4 + (s * 5) % 17;  // at least max_query_len: room for the front padding
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < len; ++i) prompt.push_back(static_cast<int32_t>(1 + (s * 31 + i * 7) % (vocab - 1)));
    BatchContext b = make_single_sequence_batch(prompt, 0, kBlockSize);
    b.max_blocks_per_seq = kBlocksPerSeq;
    b.block_tables.clear();
    for (int k = 0; k < kBlocksPerSeq; ++k) b.block_tables.push_back(s * kBlocksPerSeq + k);
    for (auto& slot : b.slot_mapping) slot += static_cast<int64_t>(s) * kBlocksPerSeq * kBlockSize;
    runner.execute(b);
    lens[s] = len;
  }
  DecodeGraphPolicy policy;
  policy.enforce_eager = false;
  policy.sizes = graph_capture_sizes(17);
  policy.max_seq_len_to_capture = 96;
  policy.max_query_len = max_query_len;
  std::vector<std::vector<float> > out;
  for (size_t step = 0; step < qs.size(); ++step) {
    BatchContext b;
    b.max_blocks_per_seq = kBlocksPerSeq;
    b.query_start_loc.push_back(0);
    for (int s = 0; s < n; ++s) {
      const int q = qs[step][static_cast<size_t>(s)];
      for (int t = 0; t < q; ++t) {
        const int32_t pos = lens[s] + t;
        b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()));
        b.token_ids.push_back(static_cast<int32_t>(1 + (s * 13 + static_cast<int>(step) * 7 + t * 3) % (vocab - 1)));
        b.positions.push_back(pos);
        b.slot_mapping.push_back(static_cast<int64_t>(s) * kBlocksPerSeq * kBlockSize + pos);
      }
      lens[s] += q;
      b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.seq_lens.push_back(lens[s]);
      b.max_query_len = std::max(b.max_query_len, q);
      for (int k = 0; k < kBlocksPerSeq; ++k) b.block_tables.push_back(s * kBlocksPerSeq + k);
    }
    b.max_seq_len = *std::max_element(lens.begin(), lens.end());
    EXPECT_TRUE(is_graph_eligible(b, policy)) << "step " << step;
    const Logits l = runner.execute(b);
    EXPECT_EQ(l.rows, b.num_tokens());
    out.push_back(l.data);
  }
  return out;
}

TEST(CudaGraphs, VerifyStepsWithMixedDraftLengthsEqualEager) {
  // k = 3: sequences of one step verify 0..3 drafts; the batch replays the graph of its longest
  // sequence, the shorter ones padded with masked tokens in front. Every verified position's
  // logits equal eager ones, and the padding writes no KV (later steps read the cache).
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  ModelRunnerOptions eo = options(dir, true), go = options(dir, false);
  eo.graph_max_query_len = go.graph_max_query_len = 4;
  ModelRunner eager(eo);
  ModelRunner graphs(go);
  ASSERT_EQ(graphs.num_cuda_graphs(), 6 + 3 * 4);
  for (int n : {2, 3, 8}) {
    std::vector<std::vector<int> > qs;
    for (int step = 0; step < 4; ++step) {
      std::vector<int> row;
      for (int s = 0; s < n; ++s) row.push_back(1 + (s * 3 + step) % 4);
      qs.push_back(row);
    }
    const auto want = run_mixed_verify(eager, qs, 4);
    const auto got = run_mixed_verify(graphs, qs, 4);
    ASSERT_EQ(got.size(), want.size());
    for (size_t step = 0; step < want.size(); ++step) {
      EXPECT_LT(norm_err(got[step], want[step]), 1e-5) << "batch " << n << " step " << step;
    }
  }
}

TEST(CudaGraphs, Stories260kDecodeLogitsEqualEager) {
  CYPRIS_REQUIRE_GPU();
  expect_graph_logits_equal_eager(std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k");
}

class CudaGraphFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGraphFixture, DecodeLogitsEqualEager) {
  CYPRIS_REQUIRE_GPU();
  expect_graph_logits_equal_eager(std::string(CYPRIS_FIXTURES_DIR) + "/models/" + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGraphFixture, ::testing::ValuesIn(fixture_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// A capture bound of 2048 makes the graphs' paged attention split the keys into 512-key parts
// (split-K sized from the bound, not the batch); eager sizes them from the batch's longest context.
// With --enable-lora the decode graphs carry each row's adapter slot in their input buffer and
// run every projection's LoRA product: decode steps of rows with three adapters and the base model
// equal the eager steps; an adapter written into a slot after the capture is what the next replay
// uses (the graphs read the slots' weights in place).
TEST(CudaGraphs, DecodeStepsWithLoraAdaptersEqualEager) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_FIXTURES_DIR) + "/models/llama_gqa_tied";
  const std::string lora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/llama_gqa_tied/";
  auto make = [&](bool eager) {
    ModelRunnerOptions o = options(dir, eager);
    o.max_loras = 3;
    o.max_lora_rank = 16;
    auto r = std::make_unique<ModelRunner>(o);
    int slot = 0;
    for (const char* a : {"qv_r4", "all_r8_rslora", "mlp_o_r2_bin"}) r->load_lora(slot++, load_lora_adapter(lora + a, 16));
    return r;
  };
  auto eager = make(true), graphs = make(false);
  EXPECT_EQ(eager->num_cuda_graphs(), 0);
  EXPECT_GT(graphs->num_cuda_graphs(), 0);
  const int n = 5;
  std::vector<int32_t> slots(n), next(n), lens(n);
  for (int s = 0; s < n; ++s) slots[size_t(s)] = s % 4 - 1;  // -1 (base), 0, 1, 2, -1
  for (ModelRunner* r : {eager.get(), graphs.get()}) {
    for (int s = 0; s < n; ++s) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < 3 + s; ++i) prompt.push_back(1 + (s * 31 + i * 7) % 63);
      BatchContext b = make_single_sequence_batch(prompt, 0, kBlockSize);
      b.max_blocks_per_seq = kBlocksPerSeq;
      b.block_tables.clear();
      for (int k = 0; k < kBlocksPerSeq; ++k) b.block_tables.push_back(s * kBlocksPerSeq + k);
      for (auto& sl : b.slot_mapping) sl += static_cast<int64_t>(s) * kBlocksPerSeq * kBlockSize;
      b.lora_slots.assign(prompt.size(), slots[size_t(s)]);
      r->execute(b);
      lens[size_t(s)] = static_cast<int32_t>(prompt.size());
    }
  }
  for (int step = 0; step < 6; ++step) {
    if (step == 3) {
      // A swap after the capture: slot 1 now holds qv_r4 in both runners.
      eager->load_lora(1, load_lora_adapter(lora + "qv_r4", 16));
      graphs->load_lora(1, load_lora_adapter(lora + "qv_r4", 16));
    }
    for (int s = 0; s < n; ++s) ++lens[size_t(s)];
    for (int s = 0; s < n; ++s) next[size_t(s)] = 1 + (s * 13 + step * 5) % 63;
    BatchContext b = decode_batch(next, lens);
    b.lora_slots = slots;
    const Logits e = eager->execute(b), g = graphs->execute(b);
    ASSERT_EQ(e.rows, n);
    EXPECT_LT(norm_err(g.data, e.data), 1e-5) << "step " << step;
  }
}

TEST(CudaGraphs, SplitKDecodeOverLongContextsEqualsEager) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  auto opts = [&](bool eager) {
    ModelRunnerOptions o = options(dir, eager);
    o.load.overrides.rope_scaling_json = R"({"rope_type":"linear","factor":4.0})";
    o.load.overrides.max_model_len = 2048;
    o.max_seq_len_to_capture = 2048;
    o.num_blocks = 3 * 64;
    return o;
  };
  ModelRunner eager(opts(true));
  ModelRunner graphs(opts(false));
  ASSERT_GT(graphs.num_cuda_graphs(), 0);
  for (int n : {1, 3}) {
    const auto want = run(eager, n, 2, 64, 700);  // contexts of 700..720 tokens
    const auto got = run(graphs, n, 2, 64, 700);
    for (size_t step = 0; step < want.size(); ++step) {
      EXPECT_LT(norm_err(got[step], want[step]), 1e-5) << "batch " << n << " step " << step;
    }
  }
}

TEST(CudaGraphs, LongContextsAndPrefillsRunEagerlyWithTheSameResult) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  ModelRunner eager(options(dir, true));
  ModelRunner graphs(options(dir, false));
  // Contexts past max_seq_len_to_capture (96) take the eager path inside the graph runner.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 100; ++i) prompt.push_back(1 + (i * 13) % 400);
  const Logits a = eager.execute(make_single_sequence_batch(prompt, 0, kBlockSize));
  const Logits b = graphs.execute(make_single_sequence_batch(prompt, 0, kBlockSize));
  EXPECT_LT(norm_err(b.data, a.data), 1e-5);
  const int32_t tok[] = {7};
  const Logits c = eager.execute(make_single_sequence_batch(tok, 100, kBlockSize));
  const Logits d = graphs.execute(make_single_sequence_batch(tok, 100, kBlockSize));
  EXPECT_LT(norm_err(d.data, c.data), 1e-5);
}

TEST(CudaGraphs, ProfiledKvCacheLeavesRoomOrNamesTheFlag) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  ModelRunnerOptions o = options(dir, false);
  o.num_blocks = 0;
  o.gpu_memory_utilization = 0.2;
  ModelRunner runner(o);
  EXPECT_GT(runner.num_blocks(), 1000);
  o.gpu_memory_utilization = 1e-4;  // less than the CUDA context alone
  try {
    ModelRunner tiny(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu-memory-utilization"), std::string::npos) << e.what();
  }
}

TEST(CudaGraphs, AllocatorPeakIsTheMostInUseAtOnceSinceTheReset) {
  CYPRIS_REQUIRE_GPU();
  CudaBackend be;
  DeviceTensor held = be.empty(DType::F32, {1 << 18});  // 1 MiB, in use before the reset
  be.reset_peak_memory();
  {
    DeviceTensor a = be.empty(DType::F32, {3 << 18});  // 3 MiB -> a 4 MiB block (2 MiB steps)
    DeviceTensor b = be.empty(DType::F32, {1 << 10});  // 4 KiB
  }
  DeviceTensor c = be.empty(DType::F32, {1 << 10});  // reuses b's block: no new peak
  EXPECT_EQ(be.peak_memory_bytes(), (size_t{4} << 20) + 4096);
}

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
