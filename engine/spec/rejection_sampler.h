// Verification of drafted tokens by rejection sampling (Leviathan et al. / Chen et al. 2023), the
// rule that keeps the target model's output distribution exactly.
//
// At a verified position the draft proposed token d from its distribution q, the target's
// sampling distribution (after every sampler of the request) is p. Accept d with probability
// min(1, p(d) / q(d)); on rejection draw from the residual r(x) = max(0, p(x) - q(x)) / Z. The
// emitted token then has P(x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(q(y), p(y))) r(x) = p(x).
//
// Prompt lookup is deterministic, so q is a point mass on d: accept with probability p(d), and the
// residual is p with d removed and renormalised. That is exactly what drawing x ~ p and accepting
// iff x == d does: P(accept) = p(d), and given x != d, x ~ p(. | x != d). The engine verifies n-gram
// drafts that way (verify_point_mass_drafts): the request's own sampler draws each position from
// the request's Philox stream at that output position, with the accepted drafts as history, so a
// position gets the very token it would get without speculation, and greedy rows (argmax) accept
// while the argmax equals the draft. rejection_sample() is the general rule for drafts from a
// distribution (a draft model).
#pragma once

#include <cstdint>
#include <span>

namespace cypris {

// drafts: the k proposed tokens; target_tokens: the k + 1 tokens the target's sampler drew at the
// verified positions (position i with drafts[0..i) as history). Returns how many tokens the step
// emits: the accepted drafts (the longest prefix where target_tokens[i] == drafts[i]) plus one,
// the target's own token at the first rejected position (or the bonus token after k accepted).
// The emitted tokens are target_tokens[0 .. result).
int32_t verify_point_mass_drafts(std::span<const int32_t> drafts, std::span<const int32_t> target_tokens);

// The uniforms of speculative decoding come from the request's Philox stream under keys derived
// from its stream key (kernels/common/philox.h), apart from the sampler's own draws: the draft
// model's token draw (lane 0 at the drafted position) and verification's acceptance coin (lane 0)
// and residual draw (lane 1). Independent of each other and of the target's draw, as the rule needs.
inline constexpr uint64_t kDraftDrawKeyMix = 0x9E3779B97F4A7C15ull;
inline constexpr uint64_t kVerifyKeyMix = 0xC2B2AE3D27D4EB4Full;

struct RejectionResult {
  bool accepted = false;
  int32_t token = -1;  // the draft token when accepted, else the draw from the residual
};

// One position of the general rule. target_probs, draft_probs: [vocab] distributions (sums of 1);
// draft_token has draft_probs[draft_token] > 0. u_accept, u_resample: independent uniforms in [0, 1).
// Throws cypris::Error on mismatched sizes or an out-of-range or impossible draft token.
RejectionResult rejection_sample(std::span<const float> target_probs, std::span<const float> draft_probs,
                                 int32_t draft_token, double u_accept, double u_resample);

// The token the uniform u in [0, 1) picks from probs ([vocab], sums to 1) by inverse CDF in id
// order: how a draft model's token is drawn from the distribution verification then divides by.
// A point mass gives its token for every u.
int32_t draw_from_distribution(std::span<const float> probs, double u);

}  // namespace cypris
