#include "app/server/context.h"

#include <fmt/format.h>

#include <random>

#include "app/server/errors.h"

namespace cypris::server {

bool KoboldRegistry::add(const std::string& owner, const std::string& genkey, std::shared_ptr<RequestStream> stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.emplace(std::make_pair(owner, genkey), Entry{std::move(stream), ""}).second;
}

void KoboldRegistry::append(const std::string& owner, const std::string& genkey, const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find({owner, genkey});
  if (it != entries_.end()) it->second.text += text;
}

void KoboldRegistry::remove(const std::string& owner, const std::string& genkey) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase({owner, genkey});
}

std::optional<std::string> KoboldRegistry::partial(const std::string& owner, const std::string& genkey) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find({owner, genkey});
  if (it == entries_.end()) return std::nullopt;
  return it->second.text;
}

int KoboldRegistry::abort(const std::string& owner, const std::string& genkey) {
  std::shared_ptr<RequestStream> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find({owner, genkey});
    if (it == entries_.end()) return 0;
    s = it->second.stream;
  }
  s->cancel();  // outside the lock: cancel calls into the engine
  return 1;
}

int KoboldRegistry::abort_owner(const std::string& owner) {
  std::vector<std::shared_ptr<RequestStream>> hits;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [k, e] : entries_) {
      if (k.first == owner) hits.push_back(e.stream);
    }
  }
  for (auto& s : hits) s->cancel();
  return static_cast<int>(hits.size());
}

std::string random_genkey() {
  // std::random_device reads the kernel's random source on Linux (getrandom).
  static thread_local std::random_device rd;
  std::string out = "KAI";
  for (int i = 0; i < 4; ++i) out += fmt::format("{:08x}", static_cast<uint32_t>(rd()));
  return out;
}

ServerContext::ServerContext(EngineConfig cfg, EngineFactory factory, std::shared_ptr<EngineClient> engine)
    : cfg_(std::move(cfg)), factory_(std::move(factory)), engine_(std::move(engine)) {
  std::random_device rd;
  next_id_ = (uint64_t(rd()) << 20) & 0xfffffff00000ull;  // distinct ids across restarts
}

std::shared_ptr<EngineClient> ServerContext::engine() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_;
}

std::shared_ptr<EngineClient> ServerContext::require_engine() const {
  auto e = engine();
  if (!e) throw HttpError(503, "No model is loaded; load one with POST /v1/model/load");
  return e;
}

void ServerContext::set_engine(std::shared_ptr<EngineClient> e, std::optional<EngineConfig> cfg) {
  std::shared_ptr<EngineClient> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(engine_);
    engine_ = std::move(e);
    if (cfg) cfg_.model = cfg->model;  // server options stay: the listening socket does not change
  }
  old.reset();  // the old engine goes away here (or when its last in-flight request ends)
}

EngineConfig ServerContext::engine_config() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cfg_;
}

std::vector<std::string> ServerContext::served_names() const {
  std::shared_ptr<EngineClient> e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cfg_.model.served_model_name.empty()) return cfg_.model.served_model_name;
    e = engine_;
    if (!e) return {cfg_.model.model.empty() ? std::string("none") : cfg_.model.model};
  }
  ModelInfo info = e->model_info();
  if (!info.served_names.empty()) return info.served_names;
  return {info.model.empty() ? std::string("none") : info.model};
}

std::string ServerContext::new_id(const std::string& prefix) {
  return fmt::format("{}-{:x}", prefix, next_id_.fetch_add(1));
}

void ServerContext::track(const std::shared_ptr<RequestStream>& s) {
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_.insert(s);
    cancel = stopping_;
  }
  if (cancel) s->cancel();
}

void ServerContext::untrack(const std::shared_ptr<RequestStream>& s) {
  std::lock_guard<std::mutex> lock(mu_);
  active_.erase(s);
}

void ServerContext::cancel_all() {
  std::vector<std::shared_ptr<RequestStream>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.assign(active_.begin(), active_.end());
  }
  for (auto& s : all) s->cancel();
}

struct StreamSet::Ready final : StreamListener {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> indices;  // one entry per output pushed and not yet taken

  void notify(size_t index) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      indices.push_back(index);
    }
    cv.notify_one();
  }
};

StreamSet::StreamSet(std::vector<std::shared_ptr<RequestStream>> streams)
    : streams_(std::move(streams)), ready_(std::make_shared<Ready>()) {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i]->done()) {
      ++num_done_;
    } else {
      streams_[i]->set_listener(ready_, i);
    }
  }
}

std::optional<std::pair<size_t, RequestOutput>> StreamSet::next(std::chrono::milliseconds timeout) {
  for (;;) {
    size_t i = 0;
    {
      std::unique_lock<std::mutex> lock(ready_->mu);
      if (!ready_->cv.wait_for(lock, timeout, [&] { return !ready_->indices.empty(); })) return std::nullopt;
      i = ready_->indices.front();
      ready_->indices.pop_front();
    }
    if (i >= streams_.size()) continue;
    auto out = streams_[i]->next(std::chrono::milliseconds(0));
    if (!out) continue;  // taken elsewhere (not through this set)
    if (out->finished) ++num_done_;
    return std::make_pair(i, std::move(*out));
  }
}

void StreamSet::cancel_all() {
  for (auto& s : streams_) {
    if (!s->done()) s->cancel();
  }
}

}  // namespace cypris::server
