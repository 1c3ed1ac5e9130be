// Prompt lookup: what follows the latest earlier occurrence of the longest matching suffix.
#include "engine/spec/ngram_proposer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/common/error.h"

namespace cypris {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

NgramProposer proposer(int min_n, int max_n, int k) {
  return NgramProposer({min_n, max_n, k});
}

TEST(NgramProposer, ProposesWhatFollowedTheLatestMatch) {
  // Suffix "1 2" occurred at 0 (followed by 3 4 5) and at 5 (followed by 9 9): the latest wins.
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 1, 2, 9, 9, 7, 1, 2};
  EXPECT_THAT(proposer(2, 2, 3).propose(t, 100), ElementsAre(9, 9, 7));
  EXPECT_THAT(proposer(2, 2, 1).propose(t, 100), ElementsAre(9));
  EXPECT_THAT(proposer(2, 2, 3).propose(t, 2), ElementsAre(9, 9)) << "never more than max_tokens";
  EXPECT_THAT(proposer(2, 2, 3).propose(t, 0), IsEmpty());
  // Past the end of the sequence the guess continues with itself: "9 9 7 1 2" then "9 9 ...".
  EXPECT_THAT(proposer(2, 2, 7).propose(t, 100), ElementsAre(9, 9, 7, 1, 2, 9, 9));
}

TEST(NgramProposer, LongerSuffixesComeFirst) {
  // "2 3" last occurred at 6 (-> 8), but "1 2 3" only at 0 (-> 4 5): max_n 3 prefers the longer match.
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 0, 2, 3, 8, 1, 2, 3};
  EXPECT_THAT(proposer(2, 3, 2).propose(t, 100), ElementsAre(4, 5));
  EXPECT_THAT(proposer(2, 2, 2).propose(t, 100), ElementsAre(8, 1));
}

TEST(NgramProposer, NothingWithoutAMatchOfAtLeastMinN) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 1, 9};
  EXPECT_THAT(proposer(2, 4, 3).propose(t, 100), IsEmpty());
  EXPECT_THAT(proposer(1, 4, 3).propose(t, 100), IsEmpty()) << "9 never occurred before";
  EXPECT_THAT(proposer(1, 1, 3).propose(std::vector<int32_t>{5}, 100), IsEmpty());
  EXPECT_THAT(proposer(1, 1, 3).propose(std::vector<int32_t>{}, 100), IsEmpty());
}

TEST(NgramProposer, ARepeatingTailProposesTheRepetition) {
  // A period-2 tail: the latest earlier "7 8" overlaps the suffix; the guess repeats the period.
  const std::vector<int32_t> t = {3, 7, 8, 7, 8, 7, 8};
  EXPECT_THAT(proposer(1, 2, 5).propose(t, 100), ElementsAre(7, 8, 7, 8, 7));
  const std::vector<int32_t> same = {4, 4, 4};
  EXPECT_THAT(proposer(1, 3, 4).propose(same, 100), ElementsAre(4, 4, 4, 4));
}

TEST(NgramProposer, BadSizesNameTheFlag) {
  auto error_of = [](NgramProposerConfig c) {
    try {
      NgramProposer p(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(error_of({0, 2, 3}), HasSubstr("--ngram-prompt-lookup-min"));
  EXPECT_THAT(error_of({3, 2, 3}), HasSubstr("--ngram-prompt-lookup-max"));
  EXPECT_THAT(error_of({1, 2, 0}), HasSubstr("--num-speculative-tokens"));
}

}  // namespace
}  // namespace cypris
