// DemoServices; see demo_services.h.
#include "app/ui/demo_services.h"

#include "engine/common/error.h"

namespace cypris {

std::shared_ptr<EngineClient> DemoServices::load_engine(const EngineConfig& cfg,
                                                        const std::function<void(const LoadProgress&)>& progress,
                                                        const std::atomic<bool>&) {
  progress(LoadProgress{0.0, "checking options"});
  CYPRIS_FAIL("{}: cannot load '{}' (this build of the desktop app has no inference engine wired in yet)",
              kEngineUnavailable, cfg.model.model);
}

void DemoServices::start_server(const EngineConfig&, std::shared_ptr<EngineClient>) {
  CYPRIS_FAIL("the API server is not available in this build");
}

std::vector<HubModelSummary> DemoServices::hub_search(const std::string&) {
  CYPRIS_FAIL(
      "the Hugging Face Hub client is not available in this build; use a local model folder "
      "or `cypris download REPO`");
}

std::vector<HubRef> DemoServices::hub_refs(const std::string&) {
  CYPRIS_FAIL("the Hugging Face Hub client is not available in this build");
}

std::vector<HubFile> DemoServices::hub_files(const std::string&, const std::string&) {
  CYPRIS_FAIL("the Hugging Face Hub client is not available in this build");
}

std::string DemoServices::hub_download(const std::string&, const std::string&, const std::vector<std::string>&,
                                       const std::function<void(const FileProgress&)>&, const std::atomic<bool>&) {
  CYPRIS_FAIL("the Hugging Face Hub client is not available in this build");
}

void DemoServices::delete_cached(const std::string&, const std::string&) {
  CYPRIS_FAIL("the Hugging Face cache is not available in this build");
}

std::vector<int32_t> DemoServices::apply_chat_template(const EngineClient&, const std::vector<ChatTemplateMessage>&) {
  CYPRIS_FAIL("chat templates are not available in this build");
}

std::shared_ptr<RequestStream> DemoServices::generate(EngineClient&, const std::string&, std::vector<int32_t>,
                                                      const nlohmann::json&) {
  CYPRIS_FAIL("{}", kEngineUnavailable);
}

}  // namespace cypris
