// Request: status names and the small mutations that need checks.
#include "engine/request/request.h"

#include <algorithm>
#include <stdexcept>

namespace cypris {

bool is_finished(RequestStatus status) {
  switch (status) {
    case RequestStatus::FinishedStopped:
    case RequestStatus::FinishedLength:
    case RequestStatus::FinishedAborted:
    case RequestStatus::FinishedError:
      return true;
    default:
      return false;
  }
}

std::string_view to_string(RequestStatus status) {
  switch (status) {
    case RequestStatus::Waiting:
      return "waiting";
    case RequestStatus::Running:
      return "running";
    case RequestStatus::Preempted:
      return "preempted";
    case RequestStatus::Swapped:
      return "swapped";
    case RequestStatus::FinishedStopped:
      return "finished_stopped";
    case RequestStatus::FinishedLength:
      return "finished_length";
    case RequestStatus::FinishedAborted:
      return "finished_aborted";
    case RequestStatus::FinishedError:
      return "finished_error";
  }
  return "unknown";
}

Request::Request(std::string request_id, std::vector<int32_t> prompt_token_ids, int32_t max_tokens,
                 std::shared_ptr<const SamplingParams> sampling_params, int32_t priority, double arrival_time)
    : request_id_(std::move(request_id)),
      tokens_(std::move(prompt_token_ids)),
      num_prompt_tokens_(int32_t(tokens_.size())),
      max_tokens_(max_tokens),
      priority_(priority),
      arrival_time_(arrival_time),
      sampling_params_(std::move(sampling_params)) {}

void Request::replace_last_output_token(int32_t token_id) {
  // Programming errors, not bad input: the engine must only replace an uncomputed output token.
  if (num_output_tokens() == 0) throw std::logic_error("replace_last_output_token: request has no output tokens");
  if (num_computed_tokens_ >= num_tokens())
    throw std::logic_error("replace_last_output_token: the last token already has KV in the cache");
  // Block hashes stay valid: the KV-cache manager only hashes blocks that end before the last
  // token (computed blocks, or prefix-cache lookups, which never cover the last token).
  tokens_.back() = token_id;
}

void Request::truncate_output(int32_t count) {
  const int32_t drop = std::clamp(count, 0, num_tokens() - window_prompt_tokens());
  tokens_.resize(tokens_.size() - size_t(drop));
  num_computed_tokens_ = std::min(num_computed_tokens_, num_tokens());
}

void Request::shift_context(int32_t keep, int32_t count) {
  if (keep < 0 || count < 1 || int64_t(keep) + count > num_tokens())
    throw std::logic_error("Request::shift_context: the dropped range is outside the window");
  const int32_t prompt_end = window_prompt_tokens();
  const int32_t from_prompt = std::clamp(prompt_end - keep, 0, count);
  tokens_.erase(tokens_.begin() + keep, tokens_.begin() + keep + count);
  num_shifted_prompt_ += from_prompt;
  num_shifted_outputs_ += count - from_prompt;
  num_computed_tokens_ = std::min(num_computed_tokens_, keep);
}

std::shared_ptr<Request> Request::fork(std::string child_id) const {
  auto child = std::make_shared<Request>(*this);
  child->request_id_ = std::move(child_id);
  child->spec_token_ids_.clear();
  return child;
}

}  // namespace cypris
