// Scheduler: continuous batching with a per-step token budget (vLLM v1 core/sched/scheduler.py).
//
// Each step hands out max_num_batched_tokens across at most max_num_seqs requests: running
// requests first (a decode takes 1 token, plus its drafted tokens with speculative decoding, a
// partly prefilled prompt continues with its next chunk), then swapped requests are brought back, then waiting ones are admitted in policy order
// (fcfs: arrival; priority: (priority, arrival)). When blocks run out the worst running request
// (lowest priority / latest arrival) is preempted: by recompute (blocks freed, back to waiting
// with num_computed_tokens = 0) or by swap (blocks copied to the CPU pool). Pure logic: the
// clock is injected, nothing here does I/O or touches a device. Not thread-safe: the engine
// thread owns it.
//
// One engine step (CONVENTIONS.md point 2):
//   SchedulerOutput out = scheduler.schedule();  // out.batch: what the runner runs (after swap out,
//                                                //   swap in, copy)
//   std::vector<StepResult> results = ...;        // one per out.batch.sampled_seqs entry
//   auto updates = scheduler.update_from_output(out, results);  // new tokens, finished requests
// Stop strings found after detokenizing: finish_request(id, RequestStatus::FinishedStopped).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/request/request.h"
#include "engine/kv/kv_cache_manager.h"
#include "engine/scheduler/scheduler_config.h"
#include "engine/scheduler/scheduler_output.h"

namespace cypris {

class Scheduler {
 public:
  // clock: seconds, monotonic; used only for --scheduler-delay-factor. Validates config.
  explicit Scheduler(const SchedulerConfig& config, std::function<double()> clock = {});

  // Why a request can never run here (too long for the model or for the whole KV cache), or ""
  // when it can. The message is meant for the API client.
  std::string check_request(const Request& request) const;
  // Queue a request. Throws cypris::Error with check_request()'s message for a request that can
  // never run, or when the id is already in use.
  void add_request(std::shared_ptr<Request> request);
  // End a request now (client gone, stop string found, engine fault). False if unknown.
  bool finish_request(const std::string& request_id, RequestStatus status);
  bool abort_request(const std::string& request_id) {
    return finish_request(request_id, RequestStatus::FinishedAborted);
  }
  // n > 1 / best_of / beam search: a running request is copied under a new id and shares its
  // blocks (copy-on-write). Call after update_from_output(), then give the child its own last
  // token with Request::replace_last_output_token(). nullptr when max_num_seqs is reached or
  // the parent is not running.
  std::shared_ptr<Request> fork_request(const std::string& parent_id, std::string child_id);

  // banned_strings: drop the last num_tokens output tokens of a running request (call after
  // update_from_output()). Its KV is kept up to the block holding its new last token; the rest is
  // recomputed by the next steps, which then sample the position after the new last token again.
  // False if the request is unknown or not running.
  bool rewind_request(const std::string& request_id, int32_t num_tokens);

  // Called just before a waiting or swapped request would be admitted; false leaves it where it is
  // for this step and the next waiting request is considered (a swapped one blocks the swapped
  // queue). The engine's LoRA slots use it: a request runs only once its adapter holds a device
  // slot (the check may put it into one and set Request::lora_slot), so with more adapters than
  // --max-loras requests for the others wait. Without a check every request may be admitted.
  void set_admission_check(std::function<bool(Request&)> check) { admission_check_ = std::move(check); }

  SchedulerOutput schedule();
  // Advance every scheduled request by its scheduled tokens, append sampled tokens when its
  // last known token was computed, apply finish flags and length limits, free finished
  // requests. Results for requests that finished in the meantime (aborted) are ignored.
  std::vector<RequestUpdate> update_from_output(const SchedulerOutput& output, std::span<const StepResult> results);

  bool has_unfinished_requests() const { return !requests_.empty(); }
  int32_t num_unfinished_requests() const { return int32_t(requests_.size()); }
  std::shared_ptr<Request> find(const std::string& request_id) const;
  SchedulerStats stats() const;

  const SchedulerConfig& config() const { return config_; }
  const KvCacheManager& kv_cache() const { return kv_; }
  // --context-shift: how many leading tokens of a request a shift keeps: its n_keep (a chat's system
  // prompt; -1: the prompt) up to half the context, else its prompt up to a quarter of the context.
  int32_t context_shift_keep(const Request& request) const;
  const std::vector<std::shared_ptr<Request>>& running() const { return running_; }
  const std::deque<std::shared_ptr<Request>>& waiting() const { return waiting_; }
  const std::deque<std::shared_ptr<Request>>& swapped() const { return swapped_; }

 private:
  bool before(const Request& a, const Request& b) const;  // a is served first under the policy
  void insert_sorted(std::deque<std::shared_ptr<Request>>& queue, std::shared_ptr<Request> request);
  // Preempt running_.back(); swap when allowed and possible, else recompute.
  void preempt_last_running(SchedulerOutput& out, bool allow_swap);
  void priority_preemption(SchedulerOutput& out, int32_t budget);
  void add_scheduled(SchedulerOutput& out, const std::shared_ptr<Request>& request, int32_t num_new_tokens,
                     const SlotAllocation& allocation, bool is_new, std::vector<int32_t> spec_token_ids = {});
  bool passed_delay(double now);
  // --context-shift: the request's window is full (num_tokens == max_model_len). Keeps its first
  // context_shift_keep() tokens, drops half of the rest (the oldest). With context_shift_rotate the
  // moved tokens keep their KV in fresh blocks (rotate_shifted_kv); otherwise, or when the blocks are
  // not free, the window is recomputed from the last block boundary inside the kept prefix (see
  // docs/context_shift.md).
  void shift_context(Request& request);
  // The KV of window tokens [kept_kv, computed - drop) moves from old_blocks into newly allocated
  // blocks (kv_moves for the next step); false (and nothing changed) when the blocks are not free.
  bool rotate_shifted_kv(Request& request, const std::vector<int32_t>& old_blocks, int32_t keep, int32_t drop,
                         int32_t computed);
  // Running requests with tokens left to compute. A running request whose tokens all have KV and
  // that got no new token (a beam-search beam waiting for its siblings' logits) is idle.
  int32_t num_active_running() const;
  void finish(const std::shared_ptr<Request>& request, RequestStatus status);

  SchedulerConfig config_;
  std::function<double()> clock_;
  std::function<bool(Request&)> admission_check_;
  KvCacheManager kv_;
  std::unordered_map<std::string, std::shared_ptr<Request>> requests_;  // every unfinished request
  std::vector<std::shared_ptr<Request>> running_;
  std::deque<std::shared_ptr<Request>> waiting_;
  std::deque<std::shared_ptr<Request>> swapped_;
  std::vector<std::string> finished_since_last_;
  std::unordered_set<std::string> forked_unscheduled_;  // children the runner has not seen yet
  uint64_t next_arrival_seq_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t num_context_shifts_ = 0;
  int64_t num_context_shift_moves_ = 0;
  int64_t num_context_reuses_ = 0;
  int64_t num_context_reuse_tokens_ = 0;
  int64_t num_context_reuse_moved_ = 0;
  std::vector<KvSlotMove> pending_moves_;  // of shifts since the last schedule(), for its output
  // --scheduler-delay-factor state (vLLM v0 _passed_delay).
  double prev_time_ = 0.0;
  bool prev_prompt_ = false;
  double last_prompt_latency_ = 0.0;
};

}  // namespace cypris
