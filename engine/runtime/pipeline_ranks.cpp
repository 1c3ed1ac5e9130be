#include "engine/runtime/pipeline_ranks.h"

#include "engine/common/error.h"

namespace cypris {

PipelineRank pipeline_rank_of(int process, int tp, int pp) {
  CYPRIS_CHECK(tp >= 1 && pp >= 1,
               "pipeline layout: --tensor-parallel-size {} and --pipeline-parallel-size {} must "
               "be at least 1",
               tp, pp);
  CYPRIS_CHECK(process >= 0 && process < tp * pp,
               "process {} is outside the world of --tensor-parallel-size {} x --pipeline-parallel-size {} = {} "
               "processes",
               process, tp, pp, tp * pp);
  return {process / tp, process % tp};
}

int pipeline_process(int stage, int tp_rank, int tp) {
  return stage * tp + tp_rank;
}

StageTransfers plan_stage_transfers(std::span<const MicroBatchShape> parts, int process, int tp, int pp, int64_t hidden,
                                    int64_t vocab) {
  const PipelineRank me = pipeline_rank_of(process, tp, pp);
  CYPRIS_CHECK(hidden > 0 && vocab > 0, "pipeline transfers: hidden size {} and vocabulary {}", hidden, vocab);
  StageTransfers out;
  if (pp == 1) return out;
  const bool last = me.stage + 1 == pp;
  const int logits_source = pipeline_process(pp - 1, 0, tp);
  for (int k = 0; k < static_cast<int>(parts.size()); ++k) {
    const MicroBatchShape& p = parts[static_cast<size_t>(k)];
    CYPRIS_CHECK(p.tokens > 0 && p.rows >= 0, "pipeline transfers: micro-batch {} has {} tokens and {} logits rows", k,
                 p.tokens, p.rows);
    const int64_t stream = p.tokens * hidden;
    const int64_t logits = p.rows * vocab + 1;
    if (me.stage > 0) {
      const int prev = pipeline_process(me.stage - 1, me.tp_rank, tp);
      out.recvs.push_back({k, StageTransferKind::Residual, prev, stream});
      out.recvs.push_back({k, StageTransferKind::Hidden, prev, stream});
    }
    if (process == 0) out.recvs.push_back({k, StageTransferKind::Logits, logits_source, logits});
    if (!last) {
      const int next = pipeline_process(me.stage + 1, me.tp_rank, tp);
      out.sends.push_back({k, StageTransferKind::Residual, next, stream});
      out.sends.push_back({k, StageTransferKind::Hidden, next, stream});
    } else if (me.tp_rank == 0) {
      out.sends.push_back({k, StageTransferKind::Logits, 0, logits});
    }
  }
  return out;
}

}  // namespace cypris
