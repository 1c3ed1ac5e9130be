// LoraTable: the bookkeeping of --max-loras device slots and --max-cpu-loras host copies. Slots are
// taken empty first, then from the least recently used adapter that no running request uses; a busy
// slot is never given away; host copies past the cap go least recently used first, never one a
// request still needs; an unloaded adapter keeps its slot until its requests are done.
#include "engine/core/lora_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "engine/common/error.h"
#include "engine/loader/lora_adapter.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const LoraAdapter> copy() { return std::make_shared<const LoraAdapter>(); }

// Places id and records the load as the engine does; the slot.
int admit(LoraTable& t, uint64_t id, const std::set<int>& busy = {}) {
  const auto p = t.place(id, [&](int s) { return busy.count(s) > 0; });
  if (!p) return -1;
  if (p->load) {
    t.occupy(p->slot, id);
  } else {
    t.touch_slot(p->slot);
  }
  return p->slot;
}

TEST(LoraTable, SlotsGoToTheLeastRecentlyUsedAdapter) {
  LoraTable t(2, 8);
  const uint64_t a = t.add("a", "/a", 4, copy()).info.id;
  const uint64_t b = t.add("b", "/b", 4, copy()).info.id;
  const uint64_t c = t.add("c", "/c", 4, copy()).info.id;
  EXPECT_EQ(admit(t, a), 0);
  EXPECT_EQ(admit(t, b), 1);
  // a used again: b is now the least recently used, so c takes b's slot.
  EXPECT_EQ(admit(t, a), 0);
  const auto p = t.place(c, [](int) { return false; });
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->slot, 1);
  EXPECT_TRUE(p->load);
  EXPECT_EQ(p->evicted, b);
  t.occupy(p->slot, c);
  EXPECT_EQ(t.by_id(b)->slot, -1);
  EXPECT_EQ(t.slot_holder(1), c);
  // A resident adapter keeps its slot and needs no load.
  const auto again = t.place(a, [](int) { return true; });
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->slot, 0);
  EXPECT_FALSE(again->load);
  // b comes back into the slot of a (now least recently used after c's admission).
  EXPECT_EQ(admit(t, b), 0);
  EXPECT_EQ(t.by_id(a)->slot, -1);
}

TEST(LoraTable, ABusySlotIsNeverTaken) {
  LoraTable t(2, 8);
  const uint64_t a = t.add("a", "/a", 4, copy()).info.id;
  const uint64_t b = t.add("b", "/b", 4, copy()).info.id;
  const uint64_t c = t.add("c", "/c", 4, copy()).info.id;
  EXPECT_EQ(admit(t, a), 0);
  EXPECT_EQ(admit(t, b), 1);
  // Slot 0 (a) is the least recently used but busy: c takes slot 1.
  EXPECT_EQ(admit(t, c, {0}), 1);
  EXPECT_EQ(t.slot_holder(0), a);
  // Both busy: c's placement (it holds a slot) stands, but a fourth adapter waits.
  const uint64_t d = t.add("d", "/d", 4, copy()).info.id;
  EXPECT_FALSE(t.place(d, [](int) { return true; }).has_value());
  EXPECT_EQ(t.slot_holder(0), a);
  EXPECT_EQ(t.slot_holder(1), c);
}

TEST(LoraTable, HostCopiesPastTheCapGoLeastRecentlyUsedFirstButNotWhileNeeded) {
  LoraTable t(1, 2);
  const uint64_t a = t.add("a", "/a", 4, copy()).info.id;
  const uint64_t b = t.add("b", "/b", 4, copy()).info.id;
  const uint64_t c = t.add("c", "/c", 4, copy()).info.id;
  t.use_host_copy(a);  // a used after b: b is the least recently used
  EXPECT_EQ(t.trim_host([](uint64_t) { return false; }), std::vector<uint64_t>{b});
  EXPECT_EQ(t.num_host_copies(), 2);
  EXPECT_EQ(t.by_id(b)->adapter, nullptr);
  // A copy read again is kept; while every other one is pinned, the table stays over the cap.
  t.use_host_copy(b, copy());
  EXPECT_TRUE(t.trim_host([](uint64_t) { return true; }).empty());
  EXPECT_EQ(t.num_host_copies(), 3);
  EXPECT_EQ(t.trim_host([&](uint64_t id) { return id != c; }), std::vector<uint64_t>{c});
  EXPECT_EQ(t.by_id(a)->adapter != nullptr, true);
}

TEST(LoraTable, AnUnloadedAdapterKeepsItsSlotUntilItsRequestsAreDone) {
  LoraTable t(1, 1);
  const uint64_t a = t.add("a", "/a", 4, copy()).info.id;
  EXPECT_EQ(admit(t, a), 0);
  EXPECT_TRUE(t.remove("a"));
  EXPECT_FALSE(t.remove("a"));
  EXPECT_EQ(t.find("a"), nullptr);
  EXPECT_TRUE(t.list().empty());
  t.collect([](uint64_t) { return true; });  // still used
  EXPECT_EQ(t.slot_holder(0), a);
  EXPECT_TRUE(t.has_unlisted());
  // The same name again is a new adapter with a new id.
  const uint64_t a2 = t.add("a", "/a", 4, copy()).info.id;
  EXPECT_NE(a2, a);
  EXPECT_FALSE(t.place(a2, [](int) { return true; }).has_value());
  t.collect([](uint64_t) { return false; });
  EXPECT_FALSE(t.has_unlisted());
  EXPECT_EQ(t.by_id(a), nullptr);
  EXPECT_EQ(t.slot_holder(0), 0u);
  EXPECT_EQ(admit(t, a2), 0);
}

TEST(LoraTable, BadCapsAreErrorsNamingTheFlags) {
  EXPECT_THAT([] { LoraTable t(4, 2); }, ::testing::ThrowsMessage<Error>(HasSubstr("--max-cpu-loras 2")));
  EXPECT_THAT([] { LoraTable t(0, 2); }, ::testing::ThrowsMessage<Error>(HasSubstr("--max-loras 0")));
  LoraTable t(1, 1);
  t.add("a", "/a", 4, copy());
  EXPECT_THAT([&] { t.add("a", "/b", 4, copy()); }, ::testing::ThrowsMessage<Error>(HasSubstr("'a' is already loaded")));
}

}  // namespace
}  // namespace cypris
