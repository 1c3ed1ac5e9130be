// The step messages process 0 sends the other processes of an MPI run: what goes in comes out, and a
// short or malformed message is an Error, never a read past its end.
#include "engine/runtime/step_messages.h"

#include <gtest/gtest.h>

#include <cstring>

#include "engine/common/error.h"

namespace cypris {
namespace {

BatchContext two_sequence_batch() {
  BatchContext b;
  b.token_ids = {1, 5, 9, 42};
  b.positions = {0, 1, 2, 7};
  b.slot_mapping = {16, 17, 18, -1};
  b.query_start_loc = {0, 3, 4};
  b.seq_lens = {3, 8};
  b.block_tables = {1, -1, 2, 3};
  b.max_blocks_per_seq = 2;
  b.max_query_len = 3;
  b.max_seq_len = 8;
  b.logits_indices = {2, 3};
  b.sampled_seqs = {0, 1};
  return b;
}

void expect_same(const BatchContext& a, const BatchContext& b) {
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.slot_mapping, b.slot_mapping);
  EXPECT_EQ(a.query_start_loc, b.query_start_loc);
  EXPECT_EQ(a.seq_lens, b.seq_lens);
  EXPECT_EQ(a.block_tables, b.block_tables);
  EXPECT_EQ(a.max_blocks_per_seq, b.max_blocks_per_seq);
  EXPECT_EQ(a.max_query_len, b.max_query_len);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.logits_indices, b.logits_indices);
  EXPECT_EQ(a.sampled_seqs, b.sampled_seqs);
}

TEST(StepMessages, BatchComesBackFieldForField) {
  const BatchContext b = two_sequence_batch();
  const BatchContext back = decode_batch(encode_batch(b));
  expect_same(b, back);
  EXPECT_NO_THROW(back.validate(4, 16));
  // The trivial one-sequence batch the benchmarks use, too.
  const std::vector<int32_t> ids = {1, 2, 3};
  const BatchContext one = make_single_sequence_batch(ids, 0, 16);
  expect_same(one, decode_batch(encode_batch(one)));
}

TEST(StepMessages, EveryTruncationIsAnErrorNotACrash) {
  const std::vector<char> bytes = encode_batch(two_sequence_batch());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<char> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(decode_batch(cut), Error) << n << " of " << bytes.size() << " bytes";
  }
}

TEST(StepMessages, AHugeLengthIsRefusedBeforeAllocating) {
  std::vector<char> bytes = encode_batch(two_sequence_batch());
  const int64_t huge = int64_t{1} << 60;
  std::memcpy(bytes.data(), &huge, sizeof(huge));  // token_ids' length
  try {
    decode_batch(bytes);
    FAIL() << "a length past the message was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
  std::vector<char> extra = encode_batch(two_sequence_batch());
  extra.push_back(0);
  EXPECT_THROW(decode_batch(extra), Error);
}

TEST(StepMessages, BlockMovesAndSwapSize) {
  const std::vector<BlockCopy> pairs = {{3, 7}, {0, 1}, {12, 2}};
  EXPECT_EQ(decode_block_copies(encode_block_copies(pairs)), pairs);
  EXPECT_TRUE(decode_block_copies(encode_block_copies({})).empty());
  std::vector<char> bytes = encode_block_copies(pairs);
  bytes.pop_back();
  EXPECT_THROW(decode_block_copies(bytes), Error);
  EXPECT_EQ(decode_int64(encode_int64(123456789012)), 123456789012);
  EXPECT_THROW(decode_int64(std::vector<char>(4)), Error);
}

TEST(StepMessages, KindsHaveNames) {
  EXPECT_STREQ(step_message_name(static_cast<int64_t>(StepMessage::kExecute)), "execute");
  EXPECT_STREQ(step_message_name(0), "stop");
  EXPECT_STREQ(step_message_name(99), "unknown");
}

}  // namespace
}  // namespace cypris
