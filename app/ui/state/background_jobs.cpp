// BackgroundJobs: worker threads with a shared stop flag; see background_jobs.h.
#include "app/ui/state/background_jobs.h"

#include <exception>

namespace cypris {

BackgroundJobs::BackgroundJobs(std::function<void(const std::string&)> on_error) : on_error_(std::move(on_error)) {}

BackgroundJobs::~BackgroundJobs() {
  shutdown();
}

void BackgroundJobs::run(const std::string& name, Job job) {
  std::lock_guard<std::mutex> lock(mu_);
  reap_locked();
  if (stop_) return;
  auto entry = std::make_unique<Entry>();
  Entry* e = entry.get();
  e->thread = std::thread([this, e, name, job = std::move(job)] {
    try {
      job(stop_);
    } catch (const std::exception& ex) {
      if (on_error_) on_error_(name + ": " + ex.what());
    } catch (...) {
      if (on_error_) on_error_(name + ": unknown error");
    }
    e->done = true;
  });
  entries_.push_back(std::move(entry));
}

size_t BackgroundJobs::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& e : entries_) n += e->done ? 0 : 1;
  return n;
}

void BackgroundJobs::reap_locked() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

void BackgroundJobs::shutdown() {
  stop_ = true;
  std::list<std::unique_ptr<Entry>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(entries_);
  }
  for (auto& e : all) {
    if (e->thread.joinable()) e->thread.join();
  }
}

}  // namespace cypris
