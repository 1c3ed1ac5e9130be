// State shared by the route handlers of one Server (internal to app/server/; no httplib here).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "app/server/metrics.h"
#include "app/server/server.h"
#include "engine/config/engine_config.h"
#include "engine/core/engine_client.h"

namespace cypris::server {

// Kobold generations, for /api/extra/generate/check and /api/extra/abort. Each belongs to the
// client that started it (owner: its API key, or its address when it sent none): another owner
// can neither read nor abort it, and the same genkey may be used by two owners at once.
class KoboldRegistry {
 public:
  // false when that owner already has a generation with this genkey.
  bool add(const std::string& owner, const std::string& genkey, std::shared_ptr<RequestStream> stream);
  void append(const std::string& owner, const std::string& genkey, const std::string& text);
  void remove(const std::string& owner, const std::string& genkey);
  std::optional<std::string> partial(const std::string& owner, const std::string& genkey) const;
  // Cancels the owner's generation with that genkey; returns how many were cancelled.
  int abort(const std::string& owner, const std::string& genkey);
  // Cancels every running generation of that owner (an abort without a genkey).
  int abort_owner(const std::string& owner);

 private:
  struct Entry {
    std::shared_ptr<RequestStream> stream;
    std::string text;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, Entry> entries_;  // by (owner, genkey)
};

// A random, unguessable id (128 bits, hex) for Kobold genkeys.
std::string random_genkey();

class ServerContext {
 public:
  ServerContext(EngineConfig cfg, EngineFactory factory, std::shared_ptr<EngineClient> engine);

  const EngineConfig& cfg() const { return cfg_; }
  // Null while no model is loaded.
  std::shared_ptr<EngineClient> engine() const;
  // The engine, or HttpError 503 when none is loaded.
  std::shared_ptr<EngineClient> require_engine() const;
  void set_engine(std::shared_ptr<EngineClient> e, std::optional<EngineConfig> cfg = std::nullopt);
  const EngineFactory& factory() const { return factory_; }
  EngineConfig engine_config() const;

  // Every name the model is served under; the first answers every request.
  std::vector<std::string> served_names() const;
  std::string served_name() const { return served_names().front(); }

  std::string new_id(const std::string& prefix);

  // Streams in flight, so stop() can cancel them.
  void track(const std::shared_ptr<RequestStream>& s);
  void untrack(const std::shared_ptr<RequestStream>& s);
  void cancel_all();
  bool stopping() const { return stopping_.load(); }
  void set_stopping() { stopping_ = true; }

  ServerMetrics metrics;
  KoboldRegistry kobold;

 private:
  mutable std::mutex mu_;
  EngineConfig cfg_;
  EngineFactory factory_;
  std::shared_ptr<EngineClient> engine_;
  std::atomic<uint64_t> next_id_{0};
  std::atomic<bool> stopping_{false};
  std::set<std::shared_ptr<RequestStream>> active_;
};

// Pulls outputs from several RequestStreams at once (one per prompt of a request). The streams
// tell it which of them has an output (StreamListener), so each output costs the same however
// many prompts the request has: draining a list of prompts is linear in its outputs.
class StreamSet {
 public:
  explicit StreamSet(std::vector<std::shared_ptr<RequestStream>> streams);
  // The next output of any stream, with that stream's index; nullopt when the timeout passed.
  std::optional<std::pair<size_t, RequestOutput>> next(std::chrono::milliseconds timeout);
  bool all_done() const { return num_done_ == streams_.size(); }
  void cancel_all();
  const std::vector<std::shared_ptr<RequestStream>>& streams() const { return streams_; }

 private:
  struct Ready;  // the listener: indices of streams with an output, in push order
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::shared_ptr<Ready> ready_;
  size_t num_done_ = 0;
};

}  // namespace cypris::server
