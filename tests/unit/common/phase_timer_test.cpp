// PhaseTimer: each mark ends a phase; the summary names them in order with their times and the total.
#include "engine/common/phase_timer.h"

#include <gtest/gtest.h>

namespace cypris {
namespace {

TEST(PhaseTimer, SummaryListsThePhasesInOrder) {
  PhaseTimer t("model start-up");
  t.mark("config");
  t.mark("weights");
  t.mark("KV cache");
  ASSERT_EQ(t.phases().size(), 3u);
  double sum = 0;
  for (const auto& [name, s] : t.phases()) {
    EXPECT_GE(s, 0.0) << name;
    sum += s;
  }
  const std::string line = t.summary();
  EXPECT_EQ(line.rfind("model start-up: config ", 0), 0u) << line;
  const size_t w = line.find(", weights "), k = line.find(", KV cache "), total = line.find(" (total ");
  EXPECT_NE(w, std::string::npos) << line;
  EXPECT_LT(w, k) << line;
  EXPECT_LT(k, total) << line;
  EXPECT_EQ(line.back(), ')');
  EXPECT_GE(sum, 0.0);
}

}  // namespace
}  // namespace cypris
