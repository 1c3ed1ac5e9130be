#include "engine/core/step_sampler.h"

#include <iterator>

#include "engine/core/request_tracker.h"
#include "engine/runtime/model_runner.h"

namespace cypris {

StepSampler::StepSampler(ModelRunner& runner, Sampler& sampler, RequestTracker& tracker, int max_log_probs)
    : runner_(runner), sampler_(sampler), tracker_(tracker), max_log_probs_(max_log_probs) {}

bool StepSampler::device_sampling() const {
  return runner_.can_sample_on_device();
}

std::vector<SampleOutput> StepSampler::sample(const StepLogits& logits, const StepRows& rows) {
  // The device sampler's rows come first; the others are downloaded (CPU-sampled, beam, prompt rows).
  std::vector<SampleOutput> samples;
  if (!rows.device.empty()) samples = runner_.sample_on_device(logits, 0, rows.device, max_log_probs_);
  const auto first_host = static_cast<int64_t>(rows.device.size());
  const Logits host = runner_.download(logits, first_host, logits.rows() - first_host);
  tracker_.take_host_rows(rows, host);  // before the draws: verification reads the rows' distributions
  if (!rows.host.empty()) {
    std::vector<SampleOutput> cpu = sampler_.sample(host.data.data(), rows.host);
    samples.insert(samples.end(), std::make_move_iterator(cpu.begin()), std::make_move_iterator(cpu.end()));
  }
  return samples;
}

}  // namespace cypris
