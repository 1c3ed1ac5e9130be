// The adaptive draft length moves with acceptance: down while most drafts are rejected, up while all
// are kept, within [1, --num-speculative-tokens].
#include "engine/spec/adaptive_draft_length.h"

#include <gtest/gtest.h>

namespace cypris {
namespace {

TEST(AdaptiveDraftLength, ShrinksToOneWhenDraftsFailAndGrowsBackWhenTheyHold) {
  AdaptiveDraftLength k(5);
  EXPECT_EQ(k.current(), 5);
  k.update(5, 1);  // 1 of 5 kept
  EXPECT_EQ(k.current(), 4);
  for (int i = 0; i < 10; ++i) k.update(k.current(), 0);
  EXPECT_EQ(k.current(), 1);  // never below one: a sequence keeps probing
  k.update(1, 1);
  EXPECT_EQ(k.current(), 2);
  k.update(2, 1);  // half kept: stays
  EXPECT_EQ(k.current(), 2);
  for (int i = 0; i < 10; ++i) k.update(k.current(), k.current());
  EXPECT_EQ(k.current(), 5);  // never above --num-speculative-tokens
}

TEST(AdaptiveDraftLength, AStepWithoutDraftsChangesNothing) {
  AdaptiveDraftLength k(3);
  k.update(0, 0);
  EXPECT_EQ(k.current(), 3);
}

}  // namespace
}  // namespace cypris
