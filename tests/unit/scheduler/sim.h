// Test harness for scheduler simulations: a fake model runner that performs the step's block
// copies on a fake KV store (one cell per slot holding (token, position)), checks that every
// scheduled request reads back exactly its own tokens from its block table, writes the step's
// tokens through the slot mapping, and samples a deterministic token per request. A context shift's
// token moves (kv_moves) relabel a cell with its new position.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/scheduler/batch_context.h"
#include "engine/scheduler/scheduler.h"

namespace cypris::testing {

// The token the fake model samples for a request that currently has num_tokens tokens.
inline int32_t fake_token(const std::string& id, int32_t num_tokens) {
  uint32_t h = 2166136261u;
  for (char c : id) h = (h ^ uint8_t(c)) * 16777619u;
  h = (h ^ uint32_t(num_tokens)) * 16777619u;
  return int32_t(1000 + h % 30000);
}

// One step of a schedule: request id -> scheduled tokens.
using StepPlan = std::map<std::string, int32_t>;

inline StepPlan plan_of(const SchedulerOutput& out) {
  StepPlan p;
  for (const auto& s : out.scheduled) p[s.request->request_id()] = s.num_scheduled_tokens;
  return p;
}

inline std::string to_text(const StepPlan& p) {
  std::string s = "{";
  for (const auto& [id, n] : p) s += id + ":" + std::to_string(n) + " ";
  return s + "}";
}

class FakeRunner {
 public:
  explicit FakeRunner(const SchedulerConfig& c)
      : bs_(c.block_size),
        gpu_(size_t(c.num_gpu_blocks) * size_t(c.block_size), kEmpty),
        cpu_(size_t(c.num_cpu_blocks) * size_t(c.block_size), kEmpty) {}

  // Executes the step: copies, context check, writes, sampling. `stop` lists ids whose sampled
  // token counts as EOS this step.
  std::vector<StepResult> execute(const SchedulerOutput& out, const std::set<std::string>& stop = {}) {
    // Context shifts by rotation first: each source must hold the token at old_pos; it arrives at
    // dst as the same token at new_pos (every source read before any write, as the backends do).
    std::vector<int64_t> moved;
    for (const auto& m : out.kv_moves) {
      const int64_t cell = gpu_[size_t(m.src)];
      EXPECT_EQ(uint32_t(cell), uint32_t(m.old_pos)) << "a KV move reads slot " << m.src << " at the wrong position";
      moved.push_back((cell & ~int64_t(0xffffffff)) | uint32_t(m.new_pos));
    }
    for (size_t i = 0; i < moved.size(); ++i) gpu_[size_t(out.kv_moves[i].dst)] = moved[i];
    num_moves_ += int64_t(moved.size());
    copy_blocks(out.blocks_to_swap_out, gpu_, cpu_);
    copy_blocks(out.blocks_to_swap_in, cpu_, gpu_);
    copy_blocks(out.blocks_to_copy, gpu_, gpu_);
    const BatchContext layout = build_batch_context(out);
    // Context: every token before this step must be readable through the block table.
    for (const auto& s : out.scheduled) {
      auto tokens = s.request->all_token_ids();
      for (int32_t pos = 0; pos < s.num_computed_tokens; ++pos) {
        size_t slot = size_t(s.block_ids[size_t(pos / bs_)]) * size_t(bs_) + size_t(pos % bs_);
        if (gpu_[slot] != encode(tokens[size_t(pos)], pos)) {
          ADD_FAILURE() << "request " << s.request->request_id() << " reads wrong KV at position " << pos;
          break;
        }
      }
    }
    std::set<int64_t> seen;
    for (int32_t i = 0; i < layout.num_tokens(); ++i) {
      EXPECT_TRUE(seen.insert(layout.slot_mapping[size_t(i)]).second) << "two tokens write one slot";
      gpu_[size_t(layout.slot_mapping[size_t(i)])] = encode(layout.token_ids[size_t(i)], layout.positions[size_t(i)]);
    }
    std::vector<StepResult> results;
    for (size_t j = 0; j < layout.sampled_seqs.size(); ++j) {
      const auto& sr = out.scheduled[size_t(layout.sampled_seqs[j])];
      const auto& req = *sr.request;
      StepResult res;
      res.request_id = req.request_id();
      // Drafts (speculative decoding): one row per verified position; the fake model's token at
      // each, accepted while it equals the draft, then the model's own token.
      const auto& drafts = sr.spec_token_ids;
      for (size_t i = 0; i <= drafts.size(); ++i) {
        const int32_t t = fake_token(req.request_id(), req.num_tokens() + int32_t(i));
        res.sampled_token_ids.push_back(t);
        if (i == drafts.size() || t != drafts[i]) break;
      }
      j += drafts.size();
      if (stop.count(req.request_id())) res.finish = RequestStatus::FinishedStopped;
      results.push_back(std::move(res));
    }
    return results;
  }
  int64_t num_moves() const { return num_moves_; }  // KV slot moves performed so far

 private:
  static constexpr int64_t kEmpty = -1;
  static int64_t encode(int32_t token, int32_t pos) { return (int64_t(token) << 32) | uint32_t(pos); }
  void copy_blocks(const std::vector<BlockCopy>& copies, const std::vector<int64_t>& from, std::vector<int64_t>& to) {
    for (const auto& c : copies)
      for (int32_t o = 0; o < bs_; ++o)
        to[size_t(c.dst) * size_t(bs_) + size_t(o)] = from[size_t(c.src) * size_t(bs_) + size_t(o)];
  }
  int32_t bs_;
  int64_t num_moves_ = 0;
  std::vector<int64_t> gpu_;
  std::vector<int64_t> cpu_;
};

// Structural invariants of the scheduler and its KV cache, checked after every schedule().
inline void check_invariants(const Scheduler& s, const SchedulerOutput& out, bool allow_idle = false) {
  const auto& c = s.config();
  const auto& kv = s.kv_cache();
  EXPECT_LE(out.total_num_scheduled_tokens, c.max_num_batched_tokens);
  EXPECT_LE(int32_t(out.scheduled.size()), c.max_num_seqs);
  // Idle running requests (beams waiting for their siblings) may push the running set past
  // max_num_seqs (tests that make some say so); a batch never is.
  if (!allow_idle) EXPECT_LE(int32_t(s.running().size()), c.max_num_seqs);
  int32_t sum = 0;
  std::set<std::string> ids;
  for (const auto& r : out.scheduled) {
    EXPECT_GE(r.num_scheduled_tokens, 1);
    EXPECT_TRUE(ids.insert(r.request->request_id()).second) << "scheduled twice";
    EXPECT_EQ(r.request->status(), RequestStatus::Running);
    EXPECT_GE(int64_t(r.block_ids.size()) * c.block_size, r.num_computed_tokens + r.num_scheduled_tokens);
    if (!c.enable_chunked_prefill)
      EXPECT_EQ(r.num_computed_tokens + r.num_scheduled_tokens, r.request->num_tokens() + int32_t(r.spec_token_ids.size()));
    sum += r.num_scheduled_tokens;
  }
  EXPECT_EQ(sum, out.total_num_scheduled_tokens);
  // Ref counts equal the number of tables holding each block; free + used = total.
  std::map<int32_t, int32_t> gpu_refs, cpu_refs;
  for (const auto& [id, table] : kv.tables()) {
    std::set<int32_t> in_table;
    for (int32_t b : kv.block_ids(id)) {
      EXPECT_TRUE(in_table.insert(b).second) << "block " << b << " twice in one table";
      ++(kv.is_swapped(id) ? cpu_refs : gpu_refs)[b];
    }
  }
  int32_t used = 0;
  for (int32_t b = 0; b < kv.num_gpu_blocks(); ++b) {
    int32_t expect = gpu_refs.count(b) ? gpu_refs[b] : 0;
    EXPECT_EQ(kv.gpu_pool().ref_count(b), expect) << "GPU block " << b;
    used += expect > 0;
  }
  EXPECT_EQ(used + kv.num_free_blocks(), kv.num_gpu_blocks());
  int32_t cpu_used = 0;
  for (int32_t b = 0; b < kv.num_cpu_blocks(); ++b) {
    int32_t expect = cpu_refs.count(b) ? cpu_refs[b] : 0;
    EXPECT_EQ(kv.cpu_pool().ref_count(b), expect) << "CPU block " << b;
    cpu_used += expect > 0;
  }
  EXPECT_EQ(cpu_used + kv.num_free_cpu_blocks(), kv.num_cpu_blocks());
  // Queues: running requests hold GPU blocks, swapped ones CPU blocks, waiting ones none.
  for (const auto& r : s.running()) EXPECT_TRUE(kv.has_blocks(r->request_id()) && !kv.is_swapped(r->request_id()));
  for (const auto& r : s.swapped()) EXPECT_TRUE(kv.is_swapped(r->request_id()));
  for (const auto& r : s.waiting()) {
    EXPECT_FALSE(kv.has_blocks(r->request_id()));
    EXPECT_EQ(r->num_computed_tokens(), 0);
  }
  EXPECT_EQ(s.running().size() + s.waiting().size() + s.swapped().size(), size_t(s.num_unfinished_requests()));
}

}  // namespace cypris::testing
