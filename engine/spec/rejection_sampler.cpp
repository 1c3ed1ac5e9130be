// Rejection sampling of drafted tokens (rejection_sampler.h).
#include "engine/spec/rejection_sampler.h"

#include <algorithm>
#include <stdexcept>

#include "engine/common/error.h"

namespace cypris {

int32_t verify_point_mass_drafts(std::span<const int32_t> drafts, std::span<const int32_t> target_tokens) {
  if (target_tokens.size() != drafts.size() + 1)
    throw std::logic_error("verify_point_mass_drafts: need one target token per draft plus the bonus token");
  size_t accepted = 0;
  while (accepted < drafts.size() && target_tokens[accepted] == drafts[accepted]) ++accepted;
  return static_cast<int32_t>(accepted + 1);
}

RejectionResult rejection_sample(std::span<const float> target_probs, std::span<const float> draft_probs,
                                 int32_t draft_token, double u_accept, double u_resample) {
  CYPRIS_CHECK(target_probs.size() == draft_probs.size() && !target_probs.empty(),
               "rejection sampling: the target has {} probabilities and the draft {}", target_probs.size(),
               draft_probs.size());
  CYPRIS_CHECK(draft_token >= 0 && static_cast<size_t>(draft_token) < draft_probs.size(),
               "rejection sampling: draft token {} is outside the vocabulary of {}", draft_token, draft_probs.size());
  const double q = draft_probs[static_cast<size_t>(draft_token)];
  CYPRIS_CHECK(q > 0.0, "rejection sampling: the draft proposed token {} with probability 0", draft_token);
  const double p = target_probs[static_cast<size_t>(draft_token)];
  if (u_accept < std::min(1.0, p / q)) return {true, draft_token};
  // The residual max(0, p - q), normalised; drawn by inverse CDF.
  double z = 0.0;
  for (size_t i = 0; i < target_probs.size(); ++i) z += std::max(0.0, double(target_probs[i]) - double(draft_probs[i]));
  if (z <= 0.0) return {true, draft_token};  // p == q up to rounding: a rejection cannot happen
  const double target = u_resample * z;
  double acc = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < target_probs.size(); ++i) {
    const double r = std::max(0.0, double(target_probs[i]) - double(draft_probs[i]));
    if (r <= 0.0) continue;
    last = static_cast<int32_t>(i);
    acc += r;
    if (target < acc) return {false, last};
  }
  return {false, last};  // rounding at the top end
}

int32_t draw_from_distribution(std::span<const float> probs, double u) {
  double total = 0.0;
  for (float p : probs) total += std::max(0.0f, p);
  CYPRIS_CHECK(total > 0.0, "drawing a draft token: the distribution over {} tokens is empty", probs.size());
  const double target = u * total;
  double acc = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    last = static_cast<int32_t>(i);
    acc += probs[i];
    if (target < acc) return last;
  }
  return last;  // rounding at the top end
}

}  // namespace cypris
