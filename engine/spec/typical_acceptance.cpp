// Typical acceptance (typical_acceptance.h).
#include "engine/spec/typical_acceptance.h"

#include <algorithm>
#include <cmath>

#include "engine/common/error.h"

namespace cypris {

bool typical_accept(std::span<const float> target_probs, int32_t draft_token, double posterior_threshold,
                    double posterior_alpha) {
  CYPRIS_CHECK(draft_token >= 0 && static_cast<size_t>(draft_token) < target_probs.size(),
               "typical acceptance: draft token {} is outside the vocabulary of {}", draft_token, target_probs.size());
  double entropy = 0.0;
  for (float p : target_probs) entropy -= double(p) * std::log(double(p) + 1e-5);
  const double threshold = std::min(posterior_threshold, posterior_alpha * std::exp(-entropy));
  return double(target_probs[static_cast<size_t>(draft_token)]) > threshold;
}

int32_t typical_recovered_token(std::span<const float> target_probs) {
  return static_cast<int32_t>(std::max_element(target_probs.begin(), target_probs.end()) - target_probs.begin());
}

}  // namespace cypris
