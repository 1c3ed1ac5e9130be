// One generation request as the scheduler and KV-cache manager see it: its tokens (prompt then
// outputs), how many of them already have KV in the cache (num_computed_tokens), limits,
// priority, arrival time and status. vLLM v1 accounting: a step computes tokens
// [num_computed_tokens, num_tokens), so prefill, chunked prefill, decode and recompute after
// preemption are the same operation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cypris {

struct SamplingParams;  // engine/request/sampling_params.h

enum class RequestStatus {
  Waiting,          // queued, never scheduled
  Running,          // has GPU blocks, scheduled each step while the budget allows
  Preempted,        // blocks freed (recompute); back in the waiting queue
  Swapped,          // blocks moved to the CPU pool; waits to be swapped back in
  FinishedStopped,  // EOS, stop string or stop token
  FinishedLength,   // max_tokens or the model's maximum context length reached
  FinishedAborted,  // the client went away or cancelled
  FinishedError,    // an engine fault failed this request
};

bool is_finished(RequestStatus status);
std::string_view to_string(RequestStatus status);

class Request {
 public:
  Request(std::string request_id, std::vector<int32_t> prompt_token_ids, int32_t max_tokens,
          std::shared_ptr<const SamplingParams> sampling_params = nullptr, int32_t priority = 0,
          double arrival_time = 0.0);

  const std::string& request_id() const { return request_id_; }
  const std::shared_ptr<const SamplingParams>& sampling_params() const { return sampling_params_; }

  // Tokens: prompt then outputs, one contiguous array (what the runner reads for a step). After a
  // context shift (shift_context) this is the shifted window: the dropped tokens are gone, and
  // prompt_token_ids() / output_token_ids() are the parts of the window that were prompt / output.
  std::span<const int32_t> all_token_ids() const { return tokens_; }
  std::span<const int32_t> prompt_token_ids() const { return {tokens_.data(), size_t(window_prompt_tokens())}; }
  std::span<const int32_t> output_token_ids() const {
    return {tokens_.data() + window_prompt_tokens(), tokens_.size() - size_t(window_prompt_tokens())};
  }
  int32_t token(int32_t index) const { return tokens_[size_t(index)]; }
  int32_t num_tokens() const { return int32_t(tokens_.size()); }
  // The prompt as submitted (shifts do not change it).
  int32_t num_prompt_tokens() const { return num_prompt_tokens_; }
  // Every output token generated, those a context shift dropped included (max_tokens counts these).
  int32_t num_output_tokens() const { return num_tokens() - window_prompt_tokens() + num_shifted_outputs_; }
  // --context-shift: drops `count` tokens of the window starting at index `keep` (the first `keep`
  // stay, the rest move down to close the gap). The caller (Scheduler) fixes num_computed_tokens,
  // block hashes and the KV cache.
  void shift_context(int32_t keep, int32_t count);
  // Tokens dropped by context shifts so far.
  int32_t num_shifted_tokens() const { return num_shifted_prompt_ + num_shifted_outputs_; }
  void append_output_token(int32_t token_id) { tokens_.push_back(token_id); }
  void append_output_tokens(std::span<const int32_t> token_ids) {
    tokens_.insert(tokens_.end(), token_ids.begin(), token_ids.end());
  }
  // For n > 1 / beam search after fork: a child replaces the token it copied from its parent
  // with its own sample. Only the last token, and only while it has no KV yet.
  void replace_last_output_token(int32_t token_id);
  // banned_strings: drops the last `count` output tokens (at most all of them). The caller
  // (Scheduler::rewind_request) fixes num_computed_tokens and the KV cache.
  void truncate_output(int32_t count);

  // Speculative decoding: tokens a proposer guessed after the last token, for the next step to
  // verify. The scheduler trims them to its budget and limits and drops them for anything but a
  // decode; they are never part of the request's tokens until the step accepted them.
  const std::vector<int32_t>& spec_token_ids() const { return spec_token_ids_; }
  void set_spec_token_ids(std::vector<int32_t> ids) { spec_token_ids_ = std::move(ids); }

  // Tokens whose KV is in the cache. The step computes [num_computed_tokens, num_tokens).
  int32_t num_computed_tokens() const { return num_computed_tokens_; }
  void set_num_computed_tokens(int32_t n) { num_computed_tokens_ = n; }
  // Tokens of the prompt served from the prefix cache at the last admission (stats, usage).
  int32_t num_cached_tokens() const { return num_cached_tokens_; }
  void set_num_cached_tokens(int32_t n) { num_cached_tokens_ = n; }

  int32_t max_tokens() const { return max_tokens_; }
  int32_t priority() const { return priority_; }  // lower value is scheduled first (vLLM)
  double arrival_time() const { return arrival_time_; }
  // Order of arrival at the scheduler: breaks ties between equal arrival times deterministically.
  uint64_t arrival_seq() const { return arrival_seq_; }
  void set_arrival_seq(uint64_t seq) { arrival_seq_ = seq; }

  RequestStatus status() const { return status_; }
  void set_status(RequestStatus status) { status_ = status; }
  bool finished() const { return is_finished(status_); }
  int32_t num_preemptions() const { return num_preemptions_; }
  void count_preemption() { ++num_preemptions_; }

  // Mixed into the first prefix-cache block hash so that KV computed under a different adapter
  // (a LoRA id) or salt is never shared. 0 = none. Set it before the request is first scheduled.
  uint64_t cache_salt() const { return cache_salt_; }
  void set_cache_salt(uint64_t salt) { cache_salt_ = salt; }

  // The LoRA adapter this request runs with: its slot in the model's adapter weights (-1: the
  // base model). The engine sets it with a cache salt naming the adapter.
  int32_t lora_slot() const { return lora_slot_; }
  void set_lora_slot(int32_t slot) { lora_slot_ = slot; }

  // Chained hashes of this request's full blocks, filled lazily by the KV-cache manager (tokens
  // only ever get appended, so earlier hashes stay valid).
  std::vector<uint64_t>& block_hashes() { return block_hashes_; }
  const std::vector<uint64_t>& block_hashes() const { return block_hashes_; }

  // A copy for fork (n > 1, best_of, beam search): same tokens, progress and limits, new id.
  std::shared_ptr<Request> fork(std::string child_id) const;

 private:
  std::string request_id_;
  std::vector<int32_t> tokens_;
  int32_t num_prompt_tokens_ = 0;
  int32_t num_shifted_prompt_ = 0;   // prompt tokens dropped by context shifts
  int32_t num_shifted_outputs_ = 0;  // output tokens dropped by context shifts
  int32_t window_prompt_tokens() const { return num_prompt_tokens_ - num_shifted_prompt_; }
  int32_t num_computed_tokens_ = 0;
  int32_t num_cached_tokens_ = 0;
  int32_t max_tokens_ = 0;
  int32_t priority_ = 0;
  double arrival_time_ = 0.0;
  uint64_t arrival_seq_ = 0;
  uint64_t cache_salt_ = 0;
  int32_t lora_slot_ = -1;
  RequestStatus status_ = RequestStatus::Waiting;
  int32_t num_preemptions_ = 0;
  std::shared_ptr<const SamplingParams> sampling_params_;
  std::vector<uint64_t> block_hashes_;
  std::vector<int32_t> spec_token_ids_;
};

}  // namespace cypris
