#include "app/ui/state/real_services.h"

#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "app/server/openai/chat_prompt.h"
#include "app/server/openai/sampling_from_json.h"
#include "app/server/server.h"
#include "engine/common/error.h"
#include "engine/config/options.h"
#include "engine/core/async_engine.h"
#include "engine/hub/cache.h"
#include "engine/hub/hub.h"
#include "engine/request/sampling_params.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris {

namespace fs = std::filesystem;

RealServices::RealServices() = default;

RealServices::~RealServices() { stop_server(); }

std::shared_ptr<EngineClient> RealServices::load_engine(const EngineConfig& cfg,
                                                        const std::function<void(const LoadProgress&)>& progress,
                                                        const std::atomic<bool>& cancel) {
  progress(LoadProgress{0.05, "checking options"});
  validate_options(cfg);  // throws for a bad combination; warnings were shown by the options panel
  CYPRIS_CHECK(!cancel.load(), "loading cancelled");
  progress(LoadProgress{0.2, "loading " + cfg.model.model});
  auto engine = std::make_shared<AsyncEngine>(cfg);
  CYPRIS_CHECK(!cancel.load(), "loading cancelled");
  {
    std::lock_guard<std::mutex> lock(mu_);
    chat_template_override_ = cfg.server.chat_template;
  }
  progress(LoadProgress{1.0, "ready"});
  return engine;
}

void RealServices::start_server(const EngineConfig& cfg, std::shared_ptr<EngineClient> engine) {
  stop_server();
  auto factory = [](const EngineConfig& c) -> std::shared_ptr<EngineClient> { return std::make_shared<AsyncEngine>(c); };
  auto server = std::make_unique<Server>(cfg, factory, std::move(engine));
  server->set_access_log([this](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    server_log_.push_back(line);
    while (server_log_.size() > 1000) server_log_.pop_front();
  });
  server->start();  // throws when the port cannot be bound
  std::lock_guard<std::mutex> lock(mu_);
  server_ = std::move(server);
}

void RealServices::stop_server() {
  std::unique_ptr<Server> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = std::move(server_);
  }
  if (s) s->stop();
}

bool RealServices::server_running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return server_ != nullptr;
}

std::vector<std::string> RealServices::take_server_log() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out(server_log_.begin(), server_log_.end());
  server_log_.clear();
  return out;
}

std::vector<HubModelSummary> RealServices::hub_search(const std::string& query) {
  hub::HubClient client;
  hub::SearchQuery q;
  q.search = query;
  q.filters = {"text-generation"};
  q.limit = 50;
  std::vector<HubModelSummary> out;
  for (const auto& m : client.search_models(q)) {
    out.push_back(HubModelSummary{m.id, m.downloads, m.likes, m.pipeline_tag, m.last_modified});
  }
  return out;
}

std::vector<HubRef> RealServices::hub_refs(const std::string& repo) {
  hub::HubClient client;
  const auto refs = client.list_refs(repo);
  std::vector<HubRef> out;
  for (const auto& b : refs.branches) out.push_back(HubRef{HubRef::Kind::Branch, b.name, b.target_commit});
  for (const auto& t : refs.tags) out.push_back(HubRef{HubRef::Kind::Tag, t.name, t.target_commit});
  return out;
}

std::vector<HubFile> RealServices::hub_files(const std::string& repo, const std::string& revision) {
  hub::HubClient client;
  std::vector<HubFile> out;
  for (const auto& f : client.list_files(repo, revision)) out.push_back(HubFile{f.path, static_cast<int64_t>(f.size)});
  return out;
}

std::string RealServices::hub_download(const std::string& repo, const std::string& revision,
                                       const std::vector<std::string>& files,
                                       const std::function<void(const FileProgress&)>& progress,
                                       const std::atomic<bool>& cancel) {
  hub::HubClient client;
  hub::DownloadOptions opts;
  opts.revision = revision;
  opts.include = files;  // exact paths are globs that match themselves
  opts.cancel = &cancel;
  opts.on_progress = [&](const hub::DownloadProgress& p) {
    if (p.file.empty()) return;
    progress(FileProgress{p.file, static_cast<int64_t>(p.file_done), static_cast<int64_t>(p.file_total),
                          p.event == hub::DownloadProgress::Event::FileFinished});
  };
  return client.snapshot_download(repo, opts).path;
}

namespace {

int64_t folder_bytes(const fs::path& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    // Snapshot entries are symlinks into blobs/: count what they point at.
    std::error_code e2;
    if (fs::is_regular_file(it->path(), e2)) total += static_cast<int64_t>(fs::file_size(it->path(), e2));
  }
  return total;
}

// "models--org--name" -> "org/name"
std::string repo_of_folder(const std::string& folder) {
  std::string s = folder.substr(8);  // after "models--"
  const auto sep = s.find("--");
  return sep == std::string::npos ? s : s.substr(0, sep) + "/" + s.substr(sep + 2);
}

}  // namespace

std::vector<CachedModel> RealServices::cached_models() {
  const auto settings = hub::settings_from_env();
  std::vector<CachedModel> out;
  std::error_code ec;
  for (const auto& repo_dir : fs::directory_iterator(settings.cache_dir, ec)) {
    const std::string name = repo_dir.path().filename().string();
    if (name.rfind("models--", 0) != 0) continue;
    const fs::path snapshots = repo_dir.path() / "snapshots";
    for (const auto& snap : fs::directory_iterator(snapshots, ec)) {
      const std::string commit = snap.path().filename().string();
      std::string revision = commit;
      // Name the snapshot by a ref that points at it, when there is one.
      for (const auto& ref : fs::recursive_directory_iterator(repo_dir.path() / "refs", ec)) {
        if (!ref.is_regular_file()) continue;
        if (hub::read_small_file(ref.path().string()) == commit) {
          revision = fs::relative(ref.path(), repo_dir.path() / "refs").string();
          break;
        }
      }
      out.push_back(CachedModel{repo_of_folder(name), revision, snap.path().string(), folder_bytes(snap.path())});
    }
  }
  return out;
}

void RealServices::delete_cached(const std::string& repo, const std::string& revision) {
  const auto settings = hub::settings_from_env();
  hub::validate_repo_id(repo);
  const fs::path repo_dir = hub::repo_cache_dir(settings.cache_dir, repo);
  const auto commit = hub::cached_commit(repo_dir.string(), revision);
  CYPRIS_CHECK(commit.has_value(), "{} at {} is not in the cache {}", repo, revision, settings.cache_dir);
  std::error_code ec;
  fs::remove_all(repo_dir / "snapshots" / *commit, ec);
  CYPRIS_CHECK(!ec, "cannot delete {}: {}", (repo_dir / "snapshots" / *commit).string(), ec.message());
  // Refs that pointed at the snapshot go too, then blobs no snapshot links to any more.
  for (const auto& ref : fs::recursive_directory_iterator(repo_dir / "refs", ec)) {
    if (ref.is_regular_file() && hub::read_small_file(ref.path().string()) == *commit) fs::remove(ref.path(), ec);
  }
  std::set<std::string> used;
  for (const auto& e : fs::recursive_directory_iterator(repo_dir / "snapshots", ec)) {
    if (e.is_symlink()) used.insert(fs::read_symlink(e.path(), ec).filename().string());
  }
  for (const auto& blob : fs::directory_iterator(repo_dir / "blobs", ec)) {
    if (!used.count(blob.path().filename().string())) fs::remove(blob.path(), ec);
  }
}

std::vector<int32_t> RealServices::apply_chat_template(const EngineClient& engine,
                                                       const std::vector<ChatTemplateMessage>& messages) {
  const Tokenizer* tok = engine.tokenizer();
  CYPRIS_CHECK(tok, "the model was loaded without a tokenizer (--skip-tokenizer-init): chat needs one");
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  server::ChatPromptInputs in;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in.server_template = chat_template_override_.value_or("");
  }
  const std::string prompt = server::render_chat_prompt(msgs, tok, in);
  // The template writes BOS itself where the model wants it (like the OpenAI chat route).
  return tok->encode(prompt, /*add_special_tokens=*/false);
}

SamplingParams chat_sampling_params(const nlohmann::json& request) {
  server::SamplingDefaults defaults;
  defaults.max_tokens.reset();
  SamplingParams p = server::sampling_from_json(request, defaults);
  p.guided = server::guided_from_json(request);
  return p;
}

std::shared_ptr<RequestStream> RealServices::generate(EngineClient& engine, const std::string& request_id,
                                                      std::vector<int32_t> prompt_ids, const nlohmann::json& sampler) {
  auto params = std::make_shared<SamplingParams>(chat_sampling_params(sampler));
  GenerateRequest req{request_id, std::move(prompt_ids), "", params, 0};
  // The chat names its LoRA adapter as an OpenAI request does: "model" (absent: the base model).
  if (auto it = sampler.find("model"); it != sampler.end() && it->is_string()) req.lora_name = it->get<std::string>();
  return engine.submit(std::move(req));
}

}  // namespace cypris
