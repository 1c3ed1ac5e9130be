// FakeServices and FakeEngineClient: scripted stand-ins for the engine, server, hub and chat
// template behind the desktop app's AppServices, for the UI state tests. Every call is recorded;
// results are set by the test beforehand.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/ui/state/services.h"
#include "engine/core/engine_client.h"
#include "engine/request/outputs.h"

namespace cypris::fake {

class FakeEngineClient : public EngineClient {
 public:
  std::shared_ptr<RequestStream> submit(GenerateRequest req) override;
  void abort(const std::string& request_id) override;
  EngineStats stats() const override { return stats_; }
  ModelInfo model_info() const override { return info_; }
  const Tokenizer* tokenizer() const override { return nullptr; }

  EngineStats stats_{};
  ModelInfo info_{};
  std::vector<std::string> aborted_;
};

class FakeServices : public AppServices {
 public:
  // ---- what the test sets ----
  std::shared_ptr<EngineClient> engine_to_load;  // nullptr: load fails with load_error
  std::string load_error = "engine not available in this build";
  std::vector<LoadProgress> load_steps;       // reported before returning
  std::string server_error;                   // start_server throws this when non-empty
  std::vector<std::string> server_log_lines;  // handed out by take_server_log()
  std::vector<HubModelSummary> search_results;
  std::string hub_error;                              // every hub call throws this when non-empty
  std::map<std::string, std::vector<HubRef>> refs;    // repo -> refs
  std::map<std::string, std::vector<HubFile>> files;  // "repo@revision" -> files
  int64_t download_chunk = 1000;                      // bytes per progress report
  bool download_blocks_until_cancel = false;
  std::vector<CachedModel> cache;
  std::vector<int32_t> template_ids = {1, 2, 3};
  // Each generate() returns a stream fed with these deltas (text, tokens per delta), then a
  // finished output with finish_reason "stop". With hold_stream the stream stays open (the test
  // pushes or cancels).
  std::vector<std::string> reply_pieces = {"Hel", "lo", "!"};
  bool hold_stream = false;
  std::string generate_error;

  // ---- what the test reads ----
  std::vector<EngineConfig> load_calls;
  std::vector<std::vector<ChatTemplateMessage>> template_calls;
  std::vector<nlohmann::json> generate_calls;
  std::vector<std::vector<std::string>> download_calls;
  std::vector<std::pair<std::string, std::string>> delete_calls;
  // The stream of the last generate() (set on a worker thread: read it through this).
  std::shared_ptr<RequestStream> last_stream() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_stream_;
  }
  EngineConfig server_cfg;

  std::shared_ptr<EngineClient> load_engine(const EngineConfig& cfg,
                                            const std::function<void(const LoadProgress&)>& progress,
                                            const std::atomic<bool>& cancel) override;
  void start_server(const EngineConfig& cfg, std::shared_ptr<EngineClient> engine) override;
  void stop_server() override;
  bool server_running() const override { return running_; }
  std::vector<std::string> take_server_log() override;
  std::vector<HubModelSummary> hub_search(const std::string& query) override;
  std::vector<HubRef> hub_refs(const std::string& repo) override;
  std::vector<HubFile> hub_files(const std::string& repo, const std::string& revision) override;
  std::string hub_download(const std::string& repo, const std::string& revision, const std::vector<std::string>& names,
                           const std::function<void(const FileProgress&)>& progress,
                           const std::atomic<bool>& cancel) override;
  std::vector<CachedModel> cached_models() override;
  void delete_cached(const std::string& repo, const std::string& revision) override;
  std::vector<int32_t> apply_chat_template(const EngineClient& engine,
                                           const std::vector<ChatTemplateMessage>& messages) override;
  std::shared_ptr<RequestStream> generate(EngineClient& engine, const std::string& request_id,
                                          std::vector<int32_t> prompt_ids, const nlohmann::json& sampler) override;

 private:
  mutable std::mutex mu_;
  std::atomic<bool> running_{false};
  std::shared_ptr<RequestStream> last_stream_;
};

}  // namespace cypris::fake
