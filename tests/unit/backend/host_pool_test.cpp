// The CPU backend's activation pool (engine/backend/cpu/host_pool.h): a freed block of a size class
// is handed out again instead of fresh memory, blocks are aligned and at least as large as asked,
// the free blocks kept never exceed the cap, a block outliving the pool's owner stays valid, and
// concurrent use from several threads hands no block to two owners at once.
#include "engine/backend/cpu/host_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace cypris {
namespace {

TEST(HostBlockPool, SizeClassesAreAlignedAndWasteAtMostAnEighth) {
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{65}, size_t{65536}, size_t{65537}, size_t{100000},
                       size_t{12} << 20, (size_t{12} << 20) + 1, (size_t{1} << 30) + 7}) {
    const size_t c = HostBlockPool::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % HostBlockPool::kAlignment, 0u) << bytes;
    if (bytes >= HostBlockPool::kMinPooled) EXPECT_LE(c, bytes + bytes / 8) << bytes;
  }
  // Neighbouring sizes (a row more or less) share a class.
  EXPECT_EQ(HostBlockPool::size_class(4096 * 768 * 4), HostBlockPool::size_class(4090 * 768 * 4));
}

TEST(HostBlockPool, FreedBlocksAreReusedUpToTheCap) {
  auto pool = std::make_shared<HostBlockPool>(size_t{4} << 20);
  void* first = nullptr;
  {
    auto a = pool->get(3 << 20);
    first = a.get();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(first) % HostBlockPool::kAlignment, 0u);
    std::memset(first, 1, 3 << 20);  // the whole block is usable
  }
  EXPECT_EQ(pool->cached_bytes(), HostBlockPool::size_class(3 << 20));
  auto b = pool->get((3 << 20) - 1000);  // same class
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(pool->cached_bytes(), 0u);
  {
    auto c = pool->get(3 << 20);   // a second block of the class
    auto d = pool->get(3 << 20);   // and a third
    EXPECT_NE(c.get(), d.get());
  }
  EXPECT_LE(pool->cached_bytes(), size_t{4} << 20);  // one of the two kept, the other freed
  b.reset();
  EXPECT_LE(pool->cached_bytes(), size_t{4} << 20);
  // Small blocks bypass the pool; an empty request has no memory.
  { auto s = pool->get(100); }
  EXPECT_EQ(pool->get(0), nullptr);
  EXPECT_LE(pool->cached_bytes(), size_t{4} << 20);
}

TEST(HostBlockPool, BlocksOutliveTheOwnersPointerAndThreadsNeverShareABlock) {
  std::shared_ptr<void> kept;
  {
    auto pool = std::make_shared<HostBlockPool>(size_t{64} << 20);
    kept = pool->get(1 << 20);
  }
  std::memset(kept.get(), 7, 1 << 20);  // the pool lives on inside the block's deleter
  kept.reset();

  auto pool = std::make_shared<HostBlockPool>(size_t{64} << 20);
  std::atomic<int> clashes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        auto blk = pool->get((size_t{1} << 17) + static_cast<size_t>((i % 5) * 4096));
        auto* p = static_cast<uint32_t*>(blk.get());
        const uint32_t tag = static_cast<uint32_t>(t * 1000 + i);
        for (int j = 0; j < 64; ++j) p[j * 512] = tag;
        std::this_thread::yield();
        for (int j = 0; j < 64; ++j) {
          if (p[j * 512] != tag) ++clashes;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(clashes.load(), 0);
}

}  // namespace
}  // namespace cypris
