// DemoServices: the AppServices of a build where the engine, server and hub client are not wired
// in yet. The app runs and every panel works; loading a model, the hub and the server answer with
// a clear "not available in this build" message. The lead replaces this with the real services.
#pragma once

#include "app/ui/state/services.h"

namespace cypris {

// The message a load fails with; the e2e chat script skips when it sees it.
inline constexpr const char* kEngineUnavailable = "engine not available in this build";

class DemoServices : public AppServices {
 public:
  std::shared_ptr<EngineClient> load_engine(const EngineConfig& cfg,
                                            const std::function<void(const LoadProgress&)>& progress,
                                            const std::atomic<bool>& cancel) override;
  void start_server(const EngineConfig& cfg, std::shared_ptr<EngineClient> engine) override;
  void stop_server() override {}
  bool server_running() const override { return false; }
  std::vector<std::string> take_server_log() override { return {}; }
  std::vector<HubModelSummary> hub_search(const std::string& query) override;
  std::vector<HubRef> hub_refs(const std::string& repo) override;
  std::vector<HubFile> hub_files(const std::string& repo, const std::string& revision) override;
  std::string hub_download(const std::string& repo, const std::string& revision, const std::vector<std::string>& files,
                           const std::function<void(const FileProgress&)>& progress,
                           const std::atomic<bool>& cancel) override;
  std::vector<CachedModel> cached_models() override { return {}; }
  void delete_cached(const std::string& repo, const std::string& revision) override;
  std::vector<int32_t> apply_chat_template(const EngineClient& engine,
                                           const std::vector<ChatTemplateMessage>& messages) override;
  std::shared_ptr<RequestStream> generate(EngineClient& engine, const std::string& request_id,
                                          std::vector<int32_t> prompt_ids, const nlohmann::json& sampler) override;
};

}  // namespace cypris
