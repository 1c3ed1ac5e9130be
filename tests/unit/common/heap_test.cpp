// The heap controls the server applies (issue #26 item 4): a cap on malloc's arenas and giving
// freed memory back. Both act on this test process's own glibc heap.
#include "engine/common/heap.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace cypris {
namespace {

size_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(Heap, ArenasStayWithinTheCapWhenManyThreadsAllocateAtOnce) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "glibc only";
#endif
  if (std::getenv("MALLOC_ARENA_MAX")) GTEST_SKIP() << "MALLOC_ARENA_MAX is set: the environment decides";
  const size_t before = malloc_arena_count();
  ASSERT_GT(before, 0u) << "malloc_info lists no arena";
  ASSERT_EQ(limit_malloc_arenas(2), 2);
  // 32 threads allocating at the same time would each get an arena of their own without the cap.
  std::vector<std::thread> threads;
  for (int t = 0; t < 32; ++t) {
    threads.emplace_back([] {
      std::vector<void*> blocks;
      for (int i = 0; i < 2000; ++i) blocks.push_back(std::malloc(64 + size_t(i % 7) * 32));
      for (void* p : blocks) std::free(p);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(malloc_arena_count(), std::max<size_t>(before, 2)) << "arenas before: " << before;
}

TEST(Heap, FreedSmallBlocksGoBackToTheSystemWhenReleased) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "glibc only";
#endif
  // 128 MiB in 4 KiB blocks (under the mmap threshold: they live in the heap), touched, then all
  // freed but the last, which pins the heap's top so the free space cannot simply shrink away.
  constexpr size_t kBlock = 4096, kCount = 32768;
  std::vector<char*> blocks(kCount);
  for (auto& b : blocks) {
    b = static_cast<char*>(std::malloc(kBlock));
    ASSERT_NE(b, nullptr);
    for (size_t i = 0; i < kBlock; i += 512) b[i] = 1;
  }
  for (size_t i = 0; i + 1 < kCount; ++i) std::free(blocks[i]);
  const size_t held = rss_bytes();
  EXPECT_TRUE(release_free_heap());
  const size_t after = rss_bytes();
  std::free(blocks.back());
  EXPECT_LT(after + (64u << 20), held) << "RSS " << (held >> 20) << " MiB -> " << (after >> 20) << " MiB";
}

}  // namespace
}  // namespace cypris
