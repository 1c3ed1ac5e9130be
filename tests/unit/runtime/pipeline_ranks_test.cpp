// Pipeline stages across MPI processes: the process <-> (stage, tensor-parallel rank) mapping, and
// the transfers of a step: every send one process plans has its receive on the peer, in the same
// order and of the same size (a mismatch would hang or garble an MPI run), and process 0 gets every
// micro-batch's logits from the last stage.
#include "engine/runtime/pipeline_ranks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>

#include "engine/common/error.h"

namespace cypris {
namespace {

TEST(PipelineRanks, ProcessesAreStageMajor) {
  // tp 2 x pp 3: processes 0, 1 are stage 0; 4, 5 stage 2.
  const int tp = 2, pp = 3;
  const std::vector<std::pair<int, int>> expected = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1}};
  for (int p = 0; p < tp * pp; ++p) {
    const PipelineRank at = pipeline_rank_of(p, tp, pp);
    EXPECT_EQ(at.stage, expected[static_cast<size_t>(p)].first) << p;
    EXPECT_EQ(at.tp_rank, expected[static_cast<size_t>(p)].second) << p;
    EXPECT_EQ(pipeline_process(at.stage, at.tp_rank, tp), p);
  }
}

TEST(PipelineRanks, AProcessOutsideTheWorldIsAnError) {
  EXPECT_THROW(pipeline_rank_of(4, 2, 2), Error);
  EXPECT_THROW(pipeline_rank_of(-1, 2, 2), Error);
  try {
    pipeline_rank_of(0, 0, 2);
    FAIL() << "tp 0 accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--tensor-parallel-size 0"));
  }
}

// Plays every process's plan against the others: each (from, to) channel must see the same counts
// in the same order on both ends.
void expect_matched(std::span<const MicroBatchShape> parts, int tp, int pp, int64_t hidden, int64_t vocab) {
  std::map<std::pair<int, int>, std::vector<std::pair<StageTransferKind, int64_t>>> sent, received;
  for (int p = 0; p < tp * pp; ++p) {
    const StageTransfers plan = plan_stage_transfers(parts, p, tp, pp, hidden, vocab);
    int last_k = -1;
    for (const StageTransfer& x : plan.sends) {
      EXPECT_GE(x.micro_batch, last_k) << "sends out of micro-batch order on process " << p;
      last_k = x.micro_batch;
      sent[{p, x.peer}].push_back({x.kind, x.count});
    }
    for (const StageTransfer& x : plan.recvs) received[{x.peer, p}].push_back({x.kind, x.count});
  }
  EXPECT_EQ(sent, received) << "tp " << tp << " pp " << pp;
}

TEST(PipelineRanks, EverySendMeetsItsReceiveInOrder) {
  std::mt19937 rng(29);
  for (int tp : {1, 2, 3}) {
    for (int pp : {1, 2, 3, 4}) {
      for (int trial = 0; trial < 5; ++trial) {
        std::vector<MicroBatchShape> parts(1 + rng() % 4);
        for (auto& m : parts) {
          m.tokens = 1 + rng() % 40;
          m.rows = rng() % (m.tokens + 1);  // a chunked prefill may sample no row
        }
        expect_matched(parts, tp, pp, 64, 512);
      }
    }
  }
}

TEST(PipelineRanks, TwoStagesOfTwoRanksHandOffResidualAndHiddenAndProcess0GetsTheLogits) {
  const std::vector<MicroBatchShape> parts = {{5, 2}, {3, 0}};
  const int64_t hidden = 8, vocab = 10;
  // Process 1 = stage 0, tp rank 1: sends to process 3 (stage 1, tp rank 1), receives nothing.
  const StageTransfers p1 = plan_stage_transfers(parts, 1, 2, 2, hidden, vocab);
  EXPECT_TRUE(p1.recvs.empty());
  ASSERT_EQ(p1.sends.size(), 4u);
  EXPECT_EQ(p1.sends[0].peer, 3);
  EXPECT_EQ(p1.sends[0].kind, StageTransferKind::Residual);
  EXPECT_EQ(p1.sends[0].count, 5 * hidden);
  EXPECT_EQ(p1.sends[1].kind, StageTransferKind::Hidden);
  EXPECT_EQ(p1.sends[3].count, 3 * hidden);
  // Process 0 receives each micro-batch's logits (rows x vocab + the busy seconds) from process 2.
  const StageTransfers p0 = plan_stage_transfers(parts, 0, 2, 2, hidden, vocab);
  ASSERT_EQ(p0.recvs.size(), 2u);
  EXPECT_EQ(p0.recvs[0].kind, StageTransferKind::Logits);
  EXPECT_EQ(p0.recvs[0].peer, 2);
  EXPECT_EQ(p0.recvs[0].count, 2 * vocab + 1);
  EXPECT_EQ(p0.recvs[1].count, 1);  // no rows: the busy seconds only
  // Process 3 (last stage, tp rank 1) receives hand-offs and sends no logits.
  const StageTransfers p3 = plan_stage_transfers(parts, 3, 2, 2, hidden, vocab);
  EXPECT_TRUE(p3.sends.empty());
  EXPECT_EQ(p3.recvs.size(), 4u);
}

TEST(PipelineRanks, OneStageHasNoTransfers) {
  const std::vector<MicroBatchShape> parts = {{4, 1}};
  const StageTransfers plan = plan_stage_transfers(parts, 1, 2, 1, 8, 10);
  EXPECT_TRUE(plan.sends.empty());
  EXPECT_TRUE(plan.recvs.empty());
}

TEST(PipelineRanks, BadShapesAreErrors) {
  const std::vector<MicroBatchShape> empty_part = {{0, 0}};
  EXPECT_THROW(plan_stage_transfers(empty_part, 0, 1, 2, 8, 10), Error);
  const std::vector<MicroBatchShape> negative_rows = {{2, -1}};
  EXPECT_THROW(plan_stage_transfers(negative_rows, 0, 1, 2, 8, 10), Error);
  const std::vector<MicroBatchShape> ok = {{2, 1}};
  EXPECT_THROW(plan_stage_transfers(ok, 0, 1, 2, 0, 10), Error);
}

}  // namespace
}  // namespace cypris
