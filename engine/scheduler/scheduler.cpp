// Scheduler: one step of continuous batching and the bookkeeping after the model ran.
#include "engine/scheduler/scheduler.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string_view>

#include "engine/common/error.h"
#include "engine/request/sampling_params.h"

namespace cypris {

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void erase_from(std::vector<std::shared_ptr<Request>>& v, const Request* r) {
  v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& p) { return p.get() == r; }), v.end());
}

void erase_from(std::deque<std::shared_ptr<Request>>& q, const Request* r) {
  q.erase(std::remove_if(q.begin(), q.end(), [&](const auto& p) { return p.get() == r; }), q.end());
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, std::function<double()> clock)
    : config_((config.validate(), config)),
      clock_(clock ? std::move(clock) : std::function<double()>(steady_seconds)),
      kv_(config.kv_cache_config()) {
  if (config_.context_shift && config_.context_shift_rotate) kv_.enable_reuse(kRetainedSequences);
}

bool Scheduler::before(const Request& a, const Request& b) const {
  if (config_.policy == SchedulingPolicy::Priority && a.priority() != b.priority()) return a.priority() < b.priority();
  if (a.arrival_time() != b.arrival_time()) return a.arrival_time() < b.arrival_time();
  return a.arrival_seq() < b.arrival_seq();
}

void Scheduler::insert_sorted(std::deque<std::shared_ptr<Request>>& queue, std::shared_ptr<Request> request) {
  auto pos = std::upper_bound(queue.begin(), queue.end(), request,
                              [&](const auto& x, const auto& y) { return before(*x, *y); });
  queue.insert(pos, std::move(request));
}

std::string Scheduler::check_request(const Request& r) const {
  const int32_t prompt = r.num_prompt_tokens();
  const int32_t max_len = config_.max_model_len;
  if (prompt == 0) return "the prompt is empty; at least one token is needed";
  if (prompt > max_len)
    return fmt::format("prompt is {} tokens but this model's maximum context length is {}", prompt, max_len);
  if (r.max_tokens() < 1) return fmt::format("max_tokens must be at least 1, got {}", r.max_tokens());
  int64_t total = int64_t(prompt) + int64_t(r.max_tokens());
  if (config_.context_shift) {
    // Old tokens make room for new ones: the window never holds more than max_model_len. The
    // prompt must leave room for the first new token (its logits come from the whole prompt).
    if (prompt >= max_len)
      return fmt::format(
          "prompt is {} tokens and this model's maximum context length is {}; with --context-shift the prompt must "
          "leave room for at least one new token",
          prompt, max_len);
    if (const SamplingParams* p = r.sampling_params().get()) {
      if (!p->banned_strings.empty())
        return "banned_strings cannot be combined with --context-shift (a rewind could reach dropped tokens)";
      if (p->use_beam_search) return "beam search cannot be combined with --context-shift";
    }
    total = std::min<int64_t>(total, max_len);
  }
  if (total > max_len)
    return fmt::format(
        "prompt is {} tokens and max_tokens is {}, {} in total, but this model's maximum context length is {}; "
        "lower max_tokens to at most {}",
        prompt, r.max_tokens(), total, max_len, max_len - prompt);
  const int64_t bs = config_.block_size;
  const int64_t blocks = (total + bs - 1) / bs;
  if (blocks > config_.num_gpu_blocks)
    return fmt::format(
        "prompt plus max_tokens is {} tokens, which needs {} KV-cache blocks of {} tokens, but the whole cache "
        "has {} blocks ({} tokens); lower max_tokens or give the KV cache more memory",
        total, blocks, bs, config_.num_gpu_blocks, int64_t(config_.num_gpu_blocks) * bs);
  return {};
}

void Scheduler::add_request(std::shared_ptr<Request> request) {
  CYPRIS_CHECK(request != nullptr, "add_request: null request");
  CYPRIS_CHECK(!requests_.count(request->request_id()), "request id '{}' is already in use", request->request_id());
  std::string why = check_request(*request);
  CYPRIS_CHECK(why.empty(), "{}", why);
  request->set_arrival_seq(next_arrival_seq_++);
  request->set_status(RequestStatus::Waiting);
  request->set_num_computed_tokens(0);
  requests_.emplace(request->request_id(), request);
  insert_sorted(waiting_, std::move(request));
}

std::shared_ptr<Request> Scheduler::find(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second;
}

void Scheduler::finish(const std::shared_ptr<Request>& request, RequestStatus status) {
  switch (request->status()) {
    case RequestStatus::Running:
      erase_from(running_, request.get());
      break;
    case RequestStatus::Swapped:
      erase_from(swapped_, request.get());
      break;
    default:
      erase_from(waiting_, request.get());
      break;
  }
  kv_.remember_sequence(*request);  // --context-shift: a later prompt may repeat a stretch of it
  kv_.free(*request);
  forked_unscheduled_.erase(request->request_id());
  request->set_status(status);
  finished_since_last_.push_back(request->request_id());
  requests_.erase(request->request_id());
}

bool Scheduler::finish_request(const std::string& request_id, RequestStatus status) {
  if (!is_finished(status)) throw std::logic_error("Scheduler::finish_request: status is not a finished status");
  auto request = find(request_id);
  if (!request) return false;
  finish(request, status);
  return true;
}

std::shared_ptr<Request> Scheduler::fork_request(const std::string& parent_id, std::string child_id) {
  auto parent = find(parent_id);
  if (!parent || parent->status() != RequestStatus::Running || !kv_.has_blocks(parent_id)) return nullptr;
  if (num_active_running() >= config_.max_num_seqs) return nullptr;
  CYPRIS_CHECK(!requests_.count(child_id), "request id '{}' is already in use", child_id);
  auto child = parent->fork(std::move(child_id));
  child->set_arrival_seq(next_arrival_seq_++);
  kv_.fork(*parent, *child);
  requests_.emplace(child->request_id(), child);
  running_.push_back(child);
  forked_unscheduled_.insert(child->request_id());
  return child;
}

int32_t Scheduler::num_active_running() const {
  return int32_t(std::count_if(running_.begin(), running_.end(),
                               [](const auto& r) { return r->num_computed_tokens() < r->num_tokens(); }));
}

bool Scheduler::rewind_request(const std::string& request_id, int32_t num_tokens) {
  auto request = find(request_id);
  if (!request || request->status() != RequestStatus::Running) return false;
  request->truncate_output(num_tokens);
  // At least the new last token is recomputed: its logits pick the next token.
  const int32_t bs = config_.block_size;
  const int32_t keep = (std::min(request->num_computed_tokens(), request->num_tokens() - 1) / bs) * bs;
  kv_.truncate(*request, keep);
  request->set_num_computed_tokens(keep);
  return true;
}

void Scheduler::preempt_last_running(SchedulerOutput& out, bool allow_swap) {
  std::shared_ptr<Request> victim = running_.back();
  running_.pop_back();
  forked_unscheduled_.erase(victim->request_id());  // it will be new to the runner when it resumes
  victim->set_spec_token_ids({});
  victim->count_preemption();
  ++num_preemptions_;
  if (allow_swap && config_.preemption_mode == PreemptionMode::Swap && kv_.can_swap_out(*victim)) {
    auto copies = kv_.swap_out(*victim);
    out.blocks_to_swap_out.insert(out.blocks_to_swap_out.end(), copies->begin(), copies->end());
    victim->set_status(RequestStatus::Swapped);
    out.swapped_out_ids.push_back(victim->request_id());
    insert_sorted(swapped_, std::move(victim));
    return;
  }
  // Recompute (also the fallback when the CPU pool is full): its full blocks stay in the prefix
  // cache, so with --enable-prefix-caching the recompute is often cheap.
  kv_.free(*victim);
  victim->set_num_computed_tokens(0);
  victim->set_status(RequestStatus::Preempted);
  out.preempted_ids.push_back(victim->request_id());
  insert_sorted(waiting_, std::move(victim));
}

// Priority policy (vLLM v0 _schedule_priority_preemption): while the best waiting request
// outranks the worst running one and cannot be admitted for lack of blocks or sequence slots,
// preempt the worst running request. Always by recompute: a swapped victim would be swapped
// back in before the waiting request is admitted, and the two would trade places forever.
void Scheduler::priority_preemption(SchedulerOutput& out, int32_t budget) {
  while (!waiting_.empty() && !running_.empty()) {
    const Request& top = *waiting_.front();
    if (!before(top, *running_.back())) return;
    int32_t first_chunk = config_.enable_chunked_prefill ? std::min(top.num_tokens(), budget) : top.num_tokens();
    bool fits = num_active_running() < config_.max_num_seqs &&
                KvCacheManager::blocks_for_tokens(first_chunk, config_.block_size) <= kv_.num_free_blocks();
    if (fits) return;
    preempt_last_running(out, /*allow_swap=*/false);
  }
}

void Scheduler::add_scheduled(SchedulerOutput& out, const std::shared_ptr<Request>& request, int32_t num_new_tokens,
                              const SlotAllocation& allocation, bool is_new, std::vector<int32_t> spec_token_ids) {
  ScheduledRequest s;
  s.request = request;
  s.num_computed_tokens = request->num_computed_tokens();
  s.num_scheduled_tokens = num_new_tokens;
  s.is_new = is_new;
  s.samples = s.num_computed_tokens + num_new_tokens >= request->num_tokens();
  s.spec_token_ids = std::move(spec_token_ids);
  out.blocks_to_copy.insert(out.blocks_to_copy.end(), allocation.copies.begin(), allocation.copies.end());
  out.total_num_scheduled_tokens += num_new_tokens;
  out.scheduled.push_back(std::move(s));
}

// vLLM v0: hold new prompts back while the oldest waiting one has waited less than
// delay_factor * (latency of the last step that ran prompts), so prompts get batched together.
bool Scheduler::passed_delay(double now) {
  if (prev_prompt_) last_prompt_latency_ = now - prev_time_;
  prev_time_ = now;
  prev_prompt_ = false;
  if (config_.delay_factor <= 0.0 || waiting_.empty()) return true;
  double earliest = waiting_.front()->arrival_time();
  for (const auto& r : waiting_) earliest = std::min(earliest, r->arrival_time());
  return (now - earliest) > config_.delay_factor * last_prompt_latency_ || running_.empty();
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  out.block_size = config_.block_size;
  out.finished_ids = std::move(finished_since_last_);
  finished_since_last_.clear();
  out.kv_moves = std::move(pending_moves_);
  pending_moves_.clear();
  const bool may_admit = passed_delay(clock_());
  const bool chunked = config_.enable_chunked_prefill;
  int32_t budget = config_.max_num_batched_tokens;

  // Best first, so the preemption victim is always running_.back() and never already scheduled.
  std::stable_sort(running_.begin(), running_.end(), [&](const auto& a, const auto& b) { return before(*a, *b); });
  if (config_.policy == SchedulingPolicy::Priority) priority_preemption(out, budget);

  // 1. Running requests: decodes and the next chunk of partly prefilled prompts.
  bool preempted_now = false;
  // Never more than max_num_seqs in one batch: idle requests that got a new token (beams after a
  // search step) may have pushed the running set past it; the latest wait a step.
  for (size_t i = 0; i < running_.size() && budget > 0 && int32_t(out.scheduled.size()) < config_.max_num_seqs;) {
    std::shared_ptr<Request> request = running_[i];
    int32_t num_new = request->num_tokens() - request->num_computed_tokens();
    if (num_new <= 0 || (!chunked && num_new > budget)) {
      ++i;
      continue;
    }
    num_new = std::min(num_new, budget);
    // Speculative decoding: a decode verifies its drafts in the same step (one more query token
    // each), within the lookahead slots, the budget, max_tokens and the context length (the
    // verified tokens plus the target's own must fit). It reserves KV for its last token and
    // --num-lookahead-slots positions after it (within the context length), only when those
    // blocks are free without preempting anyone; else it decodes without drafts.
    std::vector<int32_t> spec;
    int32_t lookahead = 0;
    const int32_t slots = config_.num_lookahead_slots;
    if (num_new == 1 && !request->spec_token_ids().empty() && slots > 0) {
      const int32_t room = std::min({budget - 1, request->max_tokens() - request->num_output_tokens() - 1,
                                     config_.max_model_len - request->num_tokens() - 1, slots});
      const auto& drafts = request->spec_token_ids();
      if (room > 0) spec.assign(drafts.begin(), drafts.begin() + std::min<ptrdiff_t>(room, ptrdiff_t(drafts.size())));
      const auto n = int32_t(spec.size());
      lookahead = std::max(0, std::min(slots - n, config_.max_model_len - request->num_tokens() - n));
      // A block in reserve for each running request after this one, so drafts never preempt.
      const auto later = int32_t(running_.size() - i - 1);
      if (!spec.empty() &&
          kv_.num_blocks_needed(*request, 1 + n, nullptr, lookahead) + later > kv_.num_free_blocks()) {
        spec.clear();
      }
      if (spec.empty()) lookahead = 0;
      num_new += int32_t(spec.size());
    }
    std::optional<SlotAllocation> allocation;
    bool self_preempted = false;
    while (!(allocation = kv_.allocate_slots(*request, num_new, nullptr, lookahead))) {
      preempted_now = true;
      self_preempted = running_.back() == request;
      preempt_last_running(out, /*allow_swap=*/true);
      if (self_preempted) break;
    }
    if (self_preempted) break;  // it was the last one, nothing after it
    add_scheduled(out, request, num_new, *allocation, forked_unscheduled_.erase(request->request_id()) > 0,
                  std::move(spec));
    budget -= num_new;
    ++i;
  }

  // Running requests with nothing to compute (beams waiting for their siblings, see
  // num_active_running) hold blocks but no batch slot: they do not count against max_num_seqs.
  int32_t active = num_active_running();
  // 2. Swapped requests come back before anything new is admitted. Not in a step that just
  // preempted: the blocks were freed for the running requests.
  while (!preempted_now && !swapped_.empty() && budget > 0 && active < config_.max_num_seqs) {
    std::shared_ptr<Request> request = swapped_.front();
    int32_t num_new = request->num_tokens() - request->num_computed_tokens();
    if (!chunked && num_new > budget) break;
    num_new = std::min(num_new, budget);
    if (!kv_.can_swap_in(*request, num_new)) break;
    if (admission_check_ && !admission_check_(*request)) break;
    auto copies = kv_.swap_in(*request, num_new);
    auto allocation = kv_.allocate_slots(*request, num_new);
    if (!allocation) throw std::logic_error("Scheduler: allocation after swap-in failed");
    out.blocks_to_swap_in.insert(out.blocks_to_swap_in.end(), copies->begin(), copies->end());
    swapped_.pop_front();
    request->set_status(RequestStatus::Running);
    running_.push_back(request);
    out.swapped_in_ids.push_back(request->request_id());
    if (num_new > 0) ++active;
    if (num_new > 0) {
      add_scheduled(out, request, num_new, *allocation, true);
      budget -= num_new;
    }
  }

  // 3. Waiting requests (new, or preempted for recompute) in policy order; head-of-line blocking
  // keeps the order fair. Only a request the admission check refuses (its LoRA adapter has no slot
  // this step) is passed over: it keeps its place, and the requests after it may run.
  bool admitted_prompt = false;
  size_t next_waiting = 0;
  while (may_admit && !preempted_now && swapped_.empty() && next_waiting < waiting_.size() && budget > 0 &&
         active < config_.max_num_seqs) {
    std::shared_ptr<Request> request = waiting_[next_waiting];
    ComputedBlocks hit = kv_.get_computed_blocks(*request);
    // --context-shift by rotation: KV a finished sequence left in the cache (a chat re-sent with its
    // oldest messages dropped repeats a later stretch of it). Not for a request preempted for
    // recompute (it starts clean), nor one that wants the logprobs of its prompt tokens.
    std::optional<KvReuse> reuse;
    const SamplingParams* params = request->sampling_params().get();
    if (config_.context_shift_rotate && request->num_preemptions() == 0 && !(params && params->prompt_logprobs))
      reuse = kv_.find_reuse(*request, hit.num_tokens);
    const int32_t reused = reuse ? reuse->num_tokens() : 0;
    int32_t num_new = request->num_tokens() - hit.num_tokens - reused;
    if (!chunked && num_new > budget) break;
    num_new = std::min(num_new, budget);
    if (admission_check_ && !admission_check_(*request)) {
      ++next_waiting;
      continue;
    }
    auto allocation = kv_.allocate_slots(*request, reused + num_new, &hit);
    if (!allocation) break;
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(next_waiting));
    if (reuse) {
      // The moves only read the finished sequence's blocks, and run before anything else of the step
      // writes, so it does not matter that this allocation may have taken some of them.
      std::vector<KvSlotMove> moves = kv_.reuse_kv(*request, *reuse);
      out.kv_moves.insert(out.kv_moves.end(), moves.begin(), moves.end());
      out.context_reuses.push_back({request->request_id(), hit.num_tokens, reuse->same_end - reuse->start,
                                    reuse->num_moved(), reuse->distance(), request->num_tokens() - reuse->end});
      ++num_context_reuses_;
      num_context_reuse_tokens_ += reused;
      num_context_reuse_moved_ += reuse->num_moved();
    }
    request->set_num_computed_tokens(hit.num_tokens + reused);
    request->set_num_cached_tokens(hit.num_tokens + reused);
    request->set_status(RequestStatus::Running);
    running_.push_back(request);
    add_scheduled(out, request, num_new, *allocation, true);
    budget -= num_new;
    ++active;
    admitted_prompt = true;
  }
  prev_prompt_ = admitted_prompt;

  for (auto& s : out.scheduled) {
    auto ids = kv_.block_ids(s.request->request_id());
    s.block_ids.assign(ids.begin(), ids.end());
  }
  out.batch = build_batch_context(out);
  return out;
}

std::vector<RequestUpdate> Scheduler::update_from_output(const SchedulerOutput& output,
                                                         std::span<const StepResult> results) {
  std::unordered_map<std::string_view, const StepResult*> by_id;
  for (const auto& r : results) by_id[r.request_id] = &r;
  std::vector<RequestUpdate> updates;
  updates.reserve(output.scheduled.size());
  for (const auto& s : output.scheduled) {
    const auto& request = s.request;
    if (request->status() != RequestStatus::Running) continue;  // aborted after schedule()
    const auto& drafts = s.spec_token_ids;
    // Tokens known before the step that now have KV (all scheduled ones without drafts).
    const int32_t computed = s.num_computed_tokens + s.num_scheduled_tokens - int32_t(drafts.size());
    RequestUpdate update;
    update.request = request;
    auto it = by_id.find(request->request_id());
    const StepResult* result = it == by_id.end() ? nullptr : it->second;
    if (computed >= request->num_tokens() && result != nullptr) {
      // Never past max_tokens or the context length, even with several speculative tokens.
      int32_t room =
          std::min(request->max_tokens() - request->num_output_tokens(), config_.max_model_len - request->num_tokens());
      int32_t take = std::clamp(int32_t(result->sampled_token_ids.size()), 0, std::max(room, 0));
      update.new_token_ids.assign(result->sampled_token_ids.begin(), result->sampled_token_ids.begin() + take);
      request->append_output_tokens(update.new_token_ids);
    }
    // Drafts: the KV of the accepted ones (the leading new tokens equal to the drafts, short of the
    // last new token, which has no KV yet) is kept; the rejected positions are rolled back and
    // blocks they alone used go back to the pool. Only then are full blocks offered to the prefix
    // cache, so a cached block never holds a rejected draft.
    int32_t accepted = 0;
    while (accepted < int32_t(drafts.size()) && accepted + 1 < int32_t(update.new_token_ids.size()) &&
           update.new_token_ids[size_t(accepted)] == drafts[size_t(accepted)])
      ++accepted;
    request->set_num_computed_tokens(computed + accepted);
    if (!drafts.empty()) kv_.release_unused_blocks(*request);
    kv_.cache_computed_blocks(*request);
    RequestStatus status = RequestStatus::Running;
    if (result != nullptr && is_finished(result->finish))
      status = result->finish;
    else if (request->num_output_tokens() >= request->max_tokens())
      status = RequestStatus::FinishedLength;
    else if (request->num_tokens() >= config_.max_model_len && config_.context_shift)
      shift_context(*request);
    else if (request->num_tokens() >= config_.max_model_len)
      status = RequestStatus::FinishedLength;
    if (is_finished(status)) finish(request, status);
    update.status = request->status();
    updates.push_back(std::move(update));
  }
  return updates;
}

int32_t Scheduler::context_shift_keep(const Request& request) const {
  const int32_t prompt = request.num_prompt_tokens();
  const auto& params = request.sampling_params();
  if (params && params->n_keep) {
    const int32_t want = *params->n_keep < 0 ? prompt : std::min(*params->n_keep, prompt);
    return std::min(want, config_.max_model_len / 2);
  }
  return std::min(prompt, config_.max_model_len / 4);
}

void Scheduler::shift_context(Request& request) {
  // As llama.cpp's context shift: keep the first n_keep tokens, drop half of the others. The KV of
  // the kept prefix's full blocks stays (same tokens at the same positions); the rest of the window
  // moved to new positions and is computed again by the next steps, as a prefill of the shifted
  // window would compute it, so the continuation is that of a fresh run on the window. Block
  // hashes stay those of the window's tokens, so prefix caching keeps telling the truth.
  const int32_t keep = context_shift_keep(request);
  const int32_t drop = std::max<int32_t>(1, (request.num_tokens() - keep) / 2);
  const int32_t bs = config_.block_size;
  const int32_t computed = request.num_computed_tokens();
  const int32_t kept_kv = (std::min(keep, computed) / bs) * bs;
  std::vector<int32_t> old_blocks;
  const bool rotate = config_.context_shift_rotate && computed > keep + drop;
  if (rotate) {
    auto ids = kv_.block_ids(request.request_id());
    old_blocks.assign(ids.begin(), ids.end());
  }
  kv_.truncate(request, kept_kv);
  request.shift_context(keep, drop);
  request.set_num_computed_tokens(kept_kv);
  request.set_spec_token_ids({});
  ++num_context_shifts_;
  if (rotate) rotate_shifted_kv(request, old_blocks, keep, drop, computed);
}

bool Scheduler::rotate_shifted_kv(Request& request, const std::vector<int32_t>& old_blocks, int32_t keep,
                                  int32_t drop, int32_t computed) {
  // The old blocks went back to the pool with the truncate, so the new ones may be some of them:
  // the runner gathers every source before it writes (Backend::move_kv_slots), and runs the moves
  // before anything else of the next step, so no other request writes into them first.
  const int32_t bs = config_.block_size;
  const int32_t kept_kv = request.num_computed_tokens();
  const int32_t new_computed = computed - drop;
  if (!kv_.can_allocate(request, new_computed - kept_kv)) return false;
  auto alloc = kv_.allocate_slots(request, new_computed - kept_kv);
  if (!alloc) return false;  // (kept_kv ends on a block boundary: no copy-on-write)
  auto table = kv_.block_ids(request.request_id());
  for (int32_t t = kept_kv; t < new_computed; ++t) {
    const int32_t old = t < keep ? t : t + drop;
    const int64_t src = int64_t(old_blocks[size_t(old / bs)]) * bs + old % bs;
    const int64_t dst = int64_t(table[size_t(t / bs)]) * bs + t % bs;
    pending_moves_.push_back({src, dst, old, t});
  }
  num_context_shift_moves_ += new_computed - kept_kv;
  request.set_num_computed_tokens(new_computed);
  kv_.stop_caching_from(request, kept_kv / bs);
  return true;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_running = int32_t(running_.size());
  s.num_waiting = int32_t(waiting_.size());
  s.num_swapped = int32_t(swapped_.size());
  s.kv_cache_usage = kv_.usage();
  s.cpu_kv_cache_usage = kv_.cpu_usage();
  s.prefix_cache = kv_.prefix_cache_stats();
  s.prefix_cache_hit_rate = s.prefix_cache.hit_rate();
  s.num_preemptions = num_preemptions_;
  s.num_context_shifts = num_context_shifts_;
  s.num_context_shift_moves = num_context_shift_moves_;
  s.num_context_reuses = num_context_reuses_;
  s.num_context_reuse_tokens = num_context_reuse_tokens_;
  s.num_context_reuse_moved = num_context_reuse_moved_;
  return s;
}

}  // namespace cypris
