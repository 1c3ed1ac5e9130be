// RealServices: the desktop app's AppServices over the real parts of Cypris — the AsyncEngine,
// the HTTP server (app/server), the Hugging Face hub client and cache (engine/hub), the
// chat templates and the HTTP API's sampler-field parser.
#pragma once

#include <deque>
#include <mutex>

#include "app/ui/state/services.h"
#include "engine/request/sampling_params.h"

namespace cypris {

class Server;

// The chat's request JSON (SamplerSettings::to_request_json plus the structured-output fields) as
// SamplingParams, read by the OpenAI routes' code: sampling_from_json for the samplers and
// guided_from_json for guided_json / guided_regex / guided_choice / grammar, so a grammar reaches
// the engine exactly as it would through /v1/chat/completions. Throws server::HttpError like them.
SamplingParams chat_sampling_params(const nlohmann::json& request);

class RealServices : public AppServices {
 public:
  RealServices();
  ~RealServices() override;

  std::shared_ptr<EngineClient> load_engine(const EngineConfig& cfg,
                                            const std::function<void(const LoadProgress&)>& progress,
                                            const std::atomic<bool>& cancel) override;
  void start_server(const EngineConfig& cfg, std::shared_ptr<EngineClient> engine) override;
  void stop_server() override;
  bool server_running() const override;
  std::vector<std::string> take_server_log() override;
  std::vector<HubModelSummary> hub_search(const std::string& query) override;
  std::vector<HubRef> hub_refs(const std::string& repo) override;
  std::vector<HubFile> hub_files(const std::string& repo, const std::string& revision) override;
  std::string hub_download(const std::string& repo, const std::string& revision, const std::vector<std::string>& files,
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
  std::unique_ptr<Server> server_;
  std::deque<std::string> server_log_;
  std::optional<std::string> chat_template_override_;  // --chat-template of the loaded engine
};

}  // namespace cypris
