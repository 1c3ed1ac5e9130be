// The step's one sampling call (Engine::step: schedule -> execute -> sample -> update -> emit).
// RequestTracker::plan_rows has put the rows the device's sampler takes first in the batch's logits
// (StepRows::device: the Backend's sample_rows op where the logits are, ModelRunner::sample_on_device)
// and the others after them (StepRows::host: the CPU sampler chain, Sampler::sample; then the beam-search
// and prompt-logprob rows). StepSampler samples both kinds, downloads the host rows and hands them to
// the tracker (RequestTracker::take_host_rows) before the CPU draws, since speculative verification
// reads each drafted position's distribution. Both paths draw from the request's Philox stream, so a
// row's token does not depend on where it was sampled or what else is in the batch.
#pragma once

#include <vector>

#include "engine/sampling/sampler.h"

namespace cypris {

class ModelRunner;
class RequestTracker;
struct StepLogits;
struct StepRows;

class StepSampler {
 public:
  // max_log_probs: --max-log-probs (the device path's top-N cap).
  StepSampler(ModelRunner& runner, Sampler& sampler, RequestTracker& tracker, int max_log_probs);

  // Whether this step may send rows to the device's sampler (plan_rows' device_ok): a CUDA logits
  // rank, GPU sampling not switched off (CYPRIS_GPU_SAMPLING=0).
  bool device_sampling() const;

  // One token (with logprobs) per row of rows.sampled, in that order: the device rows, then the host
  // rows; each token is appended to its row's sampler state.
  std::vector<SampleOutput> sample(const StepLogits& logits, const StepRows& rows);

 private:
  ModelRunner& runner_;
  Sampler& sampler_;
  RequestTracker& tracker_;
  int max_log_probs_;
};

}  // namespace cypris
