// The in-process communicator and the rank workers: sums in rank order whatever the timing,
// gathers in rank order, a failing rank wakes the others instead of hanging them, and the
// start-up checks of a tensor-parallel layout name --tensor-parallel-size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/backend/cpu/cpu_communicator.h"
#include "engine/backend/tp_workers.h"
#include "engine/common/error.h"
#include "engine/loader/model_config.h"
#include "tests/support/error_of.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;

using test::error_of;

TEST(CpuCommunicator, AllReduceSumsInRankOrderOnEveryRank) {
  for (int world : {2, 3, 4}) {
    auto workers = TpWorkers::cpu(world);
    // Values whose float sum depends on the order: 1e8 + 1 + ... loses the ones unless the big
    // terms cancel first. Rank r holds value(r, i) at element i.
    auto value = [](int r, int64_t i) {
      const float big[] = {1e8f, 1.0f, -1e8f, 3.0f};
      return big[r % 4] * static_cast<float>(1 + i % 3) + 0.25f * static_cast<float>(i);
    };
    constexpr int64_t kCount = 1001;  // not a multiple of the world size
    std::vector<std::vector<float>> data(world, std::vector<float>(kCount));
    for (int rep = 0; rep < 20; ++rep) {
      for (int r = 0; r < world; ++r) {
        for (int64_t i = 0; i < kCount; ++i) data[r][i] = value(r, i);
      }
      workers->run([&](int rank) {
        if (rank == rep % world) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // vary the arrival order
        workers->comm(rank).all_reduce_sum(data[rank].data(), kCount);
      });
      for (int64_t i = 0; i < kCount; ++i) {
        float expected = value(0, i);
        for (int r = 1; r < world; ++r) expected += value(r, i);
        for (int r = 0; r < world; ++r) ASSERT_EQ(data[r][i], expected) << "world " << world << " rank " << r;
      }
    }
  }
}

TEST(CpuCommunicator, AllGatherStacksRanksInOrder) {
  auto workers = TpWorkers::cpu(3);
  std::vector<std::vector<float>> send(3), recv(3, std::vector<float>(3 * 5, -1.0f));
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 5; ++i) send[r].push_back(static_cast<float>(10 * r + i));
  }
  workers->run([&](int rank) { workers->comm(rank).all_gather(send[rank].data(), recv[rank].data(), 5); });
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < 5; ++i) EXPECT_EQ(recv[r][k * 5 + i], static_cast<float>(10 * k + i));
    }
  }
}

TEST(TpWorkers, AFailingRankWakesTheOthersAndTheGroupIsReusable) {
  auto workers = TpWorkers::cpu(4);
  std::atomic<int> woken{0};
  try {
    workers->run([&](int rank) {
      if (rank == 2) CYPRIS_FAIL("rank 2 cannot go on");
      try {
        workers->comm(rank).barrier();  // would wait forever for rank 2
      } catch (const Error&) {
        ++woken;
        throw;
      }
    });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 2 cannot go on"));  // the cause, not a follower's error
  }
  EXPECT_EQ(woken.load(), 3);
  // The next step works as usual.
  std::vector<float> v(4, 1.0f);
  workers->run([&](int rank) { workers->comm(rank).all_reduce_sum(&v[rank], 1); });
  EXPECT_EQ(v, std::vector<float>(4, 4.0f));
}

TEST(TpWorkers, ThreadInitRunsOnEachRankThreadAndItsErrorFailsTheFirstStep) {
  std::vector<std::thread::id> init_ids(3), run_ids(3);
  auto cpu = make_cpu_communicators(3);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& c : cpu) comms.push_back(std::move(c));
  TpWorkers workers(std::move(comms), nullptr, nullptr, [&](int rank) {
    init_ids[rank] = std::this_thread::get_id();
    if (rank == 1) CYPRIS_FAIL("rank 1 has no device");
  });
  EXPECT_THAT(error_of([&] { workers.run([&](int rank) { run_ids[rank] = std::this_thread::get_id(); }); }),
              HasSubstr("rank 1 has no device"));
  EXPECT_EQ(run_ids[0], init_ids[0]);
  EXPECT_EQ(run_ids[2], init_ids[2]);
  EXPECT_NE(run_ids[0], run_ids[2]);
}

ModelConfig config(int heads, int kv_heads, int64_t inter, int64_t vocab) {
  ModelConfig c;
  c.source = "/m/config.json";
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.intermediate_size = inter;
  c.vocab_size = vocab;
  return c;
}

TEST(TpChecks, LayoutsThatDoNotDivideAreRefusedByName) {
  EXPECT_NO_THROW(check_tensor_parallel(config(8, 4, 172, 512), 2));
  EXPECT_NO_THROW(check_tensor_parallel(config(8, 4, 172, 512), 4));
  EXPECT_NO_THROW(check_tensor_parallel(config(8, 2, 172, 512), 4));  // KV heads replicated
  EXPECT_NO_THROW(check_tensor_parallel(config(7, 7, 171, 500), 1));
  EXPECT_THAT(
      error_of([] { check_tensor_parallel(config(8, 4, 172, 512), 3); }),
      AllOf(HasSubstr("--tensor-parallel-size 3"), HasSubstr("attention heads (8"), HasSubstr("/m/config.json")));
  EXPECT_THAT(error_of([] { check_tensor_parallel(config(12, 3, 48, 64), 2); }),
              AllOf(HasSubstr("--tensor-parallel-size 2"), HasSubstr("KV heads (3)")));
  EXPECT_THAT(error_of([] { check_tensor_parallel(config(8, 8, 172, 512), 8); }),
              AllOf(HasSubstr("--tensor-parallel-size 8"), HasSubstr("intermediate_size (172")));
  EXPECT_NO_THROW(check_tensor_parallel(config(8, 8, 64, 32001), 8));  // vocab slices may be uneven
}

TEST(TpChecks, FewerGpusThanRanksIsAClearError) {
  EXPECT_NO_THROW(check_gpu_count(2, 2));
  EXPECT_NO_THROW(check_gpu_count(1, 4));
  EXPECT_THAT(error_of([] { check_gpu_count(4, 1); }),
              AllOf(HasSubstr("--tensor-parallel-size 4 needs 4 GPUs"), HasSubstr("only 1 is visible"),
                    HasSubstr("CUDA_VISIBLE_DEVICES")));
}

TEST(TpChecks, KvHeadsAreShardedOrReplicated) {
  EXPECT_EQ(kv_heads_per_rank(4, 2), 2);
  EXPECT_EQ(first_kv_head(4, 1, 2), 2);
  // 2 KV heads over 4 ranks: query heads 0-3 use KV head 0, 4-7 use KV head 1 (8 query heads).
  EXPECT_EQ(kv_heads_per_rank(2, 4), 1);
  const int expected[] = {0, 0, 1, 1};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(first_kv_head(2, r, 4), expected[r]) << r;
  EXPECT_EQ(first_kv_head(1, 3, 4), 0);
}

}  // namespace
}  // namespace cypris
