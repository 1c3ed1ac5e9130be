// AppServices: everything the desktop app needs from the rest of Cypris (engine loading, the HTTP
// server, the Hugging Face hub client, chat templates, sampling parameters), as one interface so
// the UI is written and tested against fakes: RealServices (real_services.h) is the implementation
// over the AsyncEngine, the HTTP server, the hub client and the chat templates; FakeServices
// (tests/support/) drives the unit tests.
//
// Threading: every call except server_running()/server_address() may block (network, disk, model
// load) and is only ever made from a background thread, never from the UI thread. Progress
// callbacks are called on that same background thread. Implementations report failures by
// throwing cypris::Error (or std::exception) with a message for the user; the caller catches.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "engine/config/engine_config.h"

namespace cypris {

class EngineClient;
class RequestStream;

// ---- Hugging Face hub ----

struct HubModelSummary {
  std::string repo;  // "owner/name"
  int64_t downloads = 0;
  int64_t likes = 0;
  std::string pipeline_tag;  // "text-generation", ... (may be empty)
  std::string last_modified;
};

struct HubRef {
  enum class Kind { Branch, Tag, Commit };
  Kind kind = Kind::Branch;
  std::string name;    // "main", "v1.0", or a commit sha
  std::string commit;  // the commit sha the ref points at (may be empty)
};

struct HubFile {
  std::string path;   // path inside the repo: "model.safetensors", "tokenizer/vocab.json"
  int64_t size = -1;  // bytes; -1 when the hub did not say
};

// Progress of one download, reported per file. bytes_done counts what is on disk for that file
// (resumed bytes included); total is -1 while unknown.
struct FileProgress {
  std::string path;
  int64_t bytes_done = 0;
  int64_t bytes_total = -1;
  bool finished = false;
};

struct CachedModel {
  std::string repo;
  std::string revision;  // the ref or commit in the cache
  std::string path;      // snapshot folder, usable as --model
  int64_t size_bytes = 0;
};

// ---- Engine loading ----

struct LoadProgress {
  double fraction = 0.0;  // 0..1
  std::string stage;      // "reading config", "loading weights 3/12", ...
};

// ---- Chat ----

struct ChatTemplateMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class AppServices {
 public:
  virtual ~AppServices() = default;

  // Loads the model described by cfg. Throws with a user-facing message on failure (bad path,
  // unsupported architecture, out of memory, or cancelled via `cancel`).
  virtual std::shared_ptr<EngineClient> load_engine(const EngineConfig& cfg,
                                                    const std::function<void(const LoadProgress&)>& progress,
                                                    const std::atomic<bool>& cancel) = 0;

  // The local OpenAI/Kobold API over an already loaded engine (cfg.server: host, port, api_keys,
  // launch_kobold_api, ...). start_server throws when the port cannot be bound.
  virtual void start_server(const EngineConfig& cfg, std::shared_ptr<EngineClient> engine) = 0;
  virtual void stop_server() = 0;
  virtual bool server_running() const = 0;  // cheap; callable from the UI thread
  // One line per HTTP request since the last call ("POST /v1/chat/completions 200 12 ms");
  // cheap, callable from the UI thread.
  virtual std::vector<std::string> take_server_log() = 0;

  // Hub.
  virtual std::vector<HubModelSummary> hub_search(const std::string& query) = 0;
  virtual std::vector<HubRef> hub_refs(const std::string& repo) = 0;
  virtual std::vector<HubFile> hub_files(const std::string& repo, const std::string& revision) = 0;
  // Downloads the files into the cache; returns the snapshot folder. Throws when cancelled.
  virtual std::string hub_download(const std::string& repo, const std::string& revision,
                                   const std::vector<std::string>& files,
                                   const std::function<void(const FileProgress&)>& progress,
                                   const std::atomic<bool>& cancel) = 0;
  virtual std::vector<CachedModel> cached_models() = 0;
  virtual void delete_cached(const std::string& repo, const std::string& revision) = 0;

  // The loaded model's chat template (or the --chat-template override) applied to the messages,
  // with the generation prompt added, tokenized.
  virtual std::vector<int32_t> apply_chat_template(const EngineClient& engine,
                                                   const std::vector<ChatTemplateMessage>& messages) = 0;

  // Starts one generation. sampler: the sampler values as request JSON (the OpenAI/Aphrodite
  // field names of app/ui/state/sampler_table.h: {"temperature": 0.7, "max_tokens": 256, ...},
  // plus the structured-output field's guided_json / guided_regex / guided_choice / grammar),
  // turned into SamplingParams the same way the HTTP API does, and "model": the LoRA adapter to run
  // with (absent: the base model). Throws for invalid values.
  virtual std::shared_ptr<RequestStream> generate(EngineClient& engine, const std::string& request_id,
                                                  std::vector<int32_t> prompt_ids, const nlohmann::json& sampler) = 0;
};

}  // namespace cypris
