#include "engine/request/outputs.h"

namespace cypris {

CompletionDelta& RequestOutput::delta(int index) {
  for (auto& d : outputs) {
    if (d.index == index) return d;
  }
  outputs.push_back(CompletionDelta{});
  outputs.back().index = index;
  return outputs.back();
}

void RequestStream::push(RequestOutput out) {
  std::shared_ptr<StreamListener> listener;
  size_t index = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_pushed_) return;  // nothing follows the last output
    finished_pushed_ = out.finished;
    queue_.push_back(std::move(out));
    listener = listener_;
    index = listener_index_;
  }
  cv_.notify_all();
  if (listener) listener->notify(index);
}

void RequestStream::set_listener(std::shared_ptr<StreamListener> listener, size_t index) {
  size_t queued = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listener_ = listener;
    listener_index_ = index;
    queued = queue_.size();
  }
  // A push after the lock above notifies by itself; the outputs before it are notified here.
  for (size_t i = 0; i < queued && listener; ++i) listener->notify(index);
}

std::optional<RequestOutput> RequestStream::next(std::optional<std::chrono::milliseconds> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [this] { return !queue_.empty() || finished_taken_; };
  if (timeout && timeout->count() <= 0) {
    // A poll: no clock read, no futex (a client polling hundreds of streams per step).
    if (!ready()) return std::nullopt;
  } else if (timeout) {
    if (!cv_.wait_for(lock, *timeout, ready)) return std::nullopt;
  } else {
    cv_.wait(lock, ready);
  }
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) finished_taken_ = true;
  return out;
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_taken_;
}

void RequestStream::cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || finished_pushed_) {
      cancelled_ = true;
      return;
    }
    cancelled_ = true;
  }
  if (on_cancel_) on_cancel_(request_id_);
}

bool RequestStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

}  // namespace cypris
