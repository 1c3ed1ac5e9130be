// Pipeline stages across MPI processes (docs/distributed.md): which stage and tensor-parallel rank a
// process holds, and the point-to-point transfers each process makes in one step cut into
// micro-batches. Process r is rank (s, t) = (r / tp, r % tp); (s, t) sends each micro-batch's
// hand-off (residual and hidden, two [tokens, hidden] tensors) to (s + 1, t); the last stage's
// t = 0 sends each micro-batch's logits rows to process 0, which samples. Pure logic: the model
// runner makes the transfers in the order listed here, and every send has its receive on the peer,
// in the same order and of the same size (tests/unit/runtime/pipeline_ranks_test.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cypris {

struct PipelineRank {
  int stage = 0;
  int tp_rank = 0;
};

// The stage and tensor-parallel rank of `process` in a world of tp x pp processes (Error when it is
// outside the world or a size is not positive).
PipelineRank pipeline_rank_of(int process, int tp, int pp);
// The process that holds rank (stage, tp_rank).
int pipeline_process(int stage, int tp_rank, int tp);

// What one micro-batch needs to size its transfers.
struct MicroBatchShape {
  int64_t tokens = 0;  // the rows of its hand-off
  int64_t rows = 0;    // its logits rows
};

enum class StageTransferKind { Residual, Hidden, Logits };

struct StageTransfer {
  int micro_batch = 0;
  StageTransferKind kind = StageTransferKind::Residual;
  int peer = 0;       // the other process (its world rank)
  int64_t count = 0;  // elements
};

// The transfers of one process for a step, in the order it makes them.
// - recvs: a stage after the first receives each micro-batch's residual then hidden (tokens x hidden
//   elements each) from (s - 1, t); process 0 (pp > 1) receives each micro-batch's logits from the
//   last stage's t = 0: rows x vocab elements plus one float, the sending stage's busy seconds for it
//   (so process 0 can report the last stage's utilisation).
// - sends: a stage before the last sends each micro-batch's residual then hidden to (s + 1, t); the
//   last stage's t = 0 sends each micro-batch's logits (same size as above) to process 0.
// Every micro-batch sends its logits message, also one with no rows (the busy seconds only).
struct StageTransfers {
  std::vector<StageTransfer> recvs;
  std::vector<StageTransfer> sends;
};
StageTransfers plan_stage_transfers(std::span<const MicroBatchShape> parts, int process, int tp, int pp, int64_t hidden,
                                    int64_t vocab);

}  // namespace cypris
