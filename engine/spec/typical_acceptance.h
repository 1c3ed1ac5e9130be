// Typical acceptance of drafted tokens (--spec-decoding-acceptance-method typical_acceptance_sampler),
// as vLLM's TypicalAcceptanceSampler defines it after Medusa (Cai et al. 2024, section 3.3.1): a
// drafted token x is kept when the target's sampling distribution p gives it
//   p(x) > min(posterior_threshold, posterior_alpha * exp(-H(p))),   H(p) = -sum_y p(y) log(p(y) + 1e-5).
// The first rejected position emits the target's most likely token; after k kept drafts the bonus
// token is the target's own draw. Unlike rejection sampling this does not keep the target's
// distribution: it trades exactness for more accepted drafts when the target is unsure (high
// entropy), and needs no draft probabilities, so it works with either proposer. Greedy rows (p a
// point mass) accept exactly the target's argmax, as rejection sampling does.
#pragma once

#include <cstdint>
#include <span>

namespace cypris {

// Whether the draft token is kept at a position with target distribution p ([vocab], sums to 1).
bool typical_accept(std::span<const float> target_probs, int32_t draft_token, double posterior_threshold,
                    double posterior_alpha);

// The most likely token of p (the lowest id among equals): what a rejected position emits.
int32_t typical_recovered_token(std::span<const float> target_probs);

}  // namespace cypris
