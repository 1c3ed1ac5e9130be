// What the engine hands to front ends: RequestOutput deltas per step, carried by a RequestStream
// (a thread-safe channel from the engine thread to one HTTP or UI thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cypris {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// Logprobs of one generated (or prompt) position.
struct PositionLogprobs {
  int32_t token_id = 0;  // the sampled (or prompt) token
  float logprob = 0.0f;  // its logprob
  int64_t rank = 0;      // 1 = most likely
  std::vector<TokenLogprob> top;  // the top-N, most likely first
};

// The new part of one of a request's n outputs since the last delta.
struct CompletionDelta {
  int index = 0;
  std::string text;                   // new text (UTF-8 complete; stop strings held back)
  std::vector<int32_t> token_ids;     // new token ids
  std::vector<PositionLogprobs> logprobs;  // one per new token, when logprobs were asked for
  std::optional<std::string> finish_reason;  // "stop", "length", "abort"; set on the last delta
  std::optional<std::string> stop_reason;    // the stop string or stop token id that ended it
  double cumulative_logprob = 0.0;
};

struct RequestOutput {
  std::string request_id;
  std::vector<CompletionDelta> outputs;  // only outputs with something new
  bool finished = false;                 // the last output of this request
  int64_t num_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;      // over all n outputs, so far
  int64_t num_cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
  // With the first output, when asked for: prompt tokens 1..P-1 (the first token has none).
  std::vector<PositionLogprobs> prompt_logprobs;
  std::optional<std::string> error;      // the request failed; finished is true
  // With error: the request's own parameters made it fail (e.g. banned_strings that no
  // continuation avoids), so front ends answer it as the client's mistake (4xx), not a fault.
  bool client_error = false;
  // The delta of output `index`, added when there is none yet.
  CompletionDelta& delta(int index);
};

// Told which stream has a new output (StreamSet: one consumer draining many streams without
// polling each of them). notify() runs on the engine thread once per pushed output; it must not
// call back into the stream.
class StreamListener {
 public:
  virtual ~StreamListener() = default;
  virtual void notify(size_t index) = 0;
};

// One request's outputs, in order. The engine thread pushes; one consumer pops.
class RequestStream {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RequestStream(std::string request_id, std::function<void(const std::string&)> on_cancel = {})
      : request_id_(std::move(request_id)), on_cancel_(std::move(on_cancel)) {}

  const std::string& request_id() const { return request_id_; }

  // Engine side.
  void push(RequestOutput out);

  // Consumer side: waits for the next output; std::nullopt after the finished output was taken
  // or when the timeout passes (check done() to tell them apart).
  std::optional<RequestOutput> next(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  bool done() const;
  // From now on every push() calls listener->notify(index); outputs already queued are notified
  // at once. One listener per stream.
  void set_listener(std::shared_ptr<StreamListener> listener, size_t index);
  // Aborts the request (client went away, user pressed stop). Idempotent.
  void cancel();
  bool cancelled() const;

 private:
  std::string request_id_;
  std::function<void(const std::string&)> on_cancel_;
  std::shared_ptr<StreamListener> listener_;
  size_t listener_index_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool finished_pushed_ = false;
  bool finished_taken_ = false;
  bool cancelled_ = false;
};

}  // namespace cypris
