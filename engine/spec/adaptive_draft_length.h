// Adaptive draft length for speculative decoding: how many tokens to propose for one sequence next,
// from how its recent drafts fared. A verification step costs more the more positions it scores,
// and on a weight-bound model a rejected draft costs little but on an overhead-bound one (or with a
// draft model, one draft forward per token) every rejected token is wasted work; so the length
// follows the acceptance: all drafts kept -> one more (up to --num-speculative-tokens), fewer than
// half kept -> one fewer (down to 1). Outputs never depend on it: verification keeps exactly the
// tokens it would keep at any length. Pure logic.
#pragma once

#include <algorithm>
#include <cstdint>

namespace cypris {

class AdaptiveDraftLength {
 public:
  explicit AdaptiveDraftLength(int32_t max_tokens = 1) : max_(std::max(1, max_tokens)), current_(max_) {}
  int32_t max_tokens() const { return max_; }
  // Tokens to propose next.
  int32_t current() const { return current_; }
  // After a verification of `proposed` drafts of which the first `accepted` were kept.
  void update(int32_t proposed, int32_t accepted) {
    if (proposed <= 0) return;
    if (accepted >= proposed) {
      current_ = std::min(max_, current_ + 1);
    } else if (2 * accepted < proposed) {
      current_ = std::max(1, current_ - 1);
    }
  }

 private:
  int32_t max_;
  int32_t current_;
};

}  // namespace cypris
