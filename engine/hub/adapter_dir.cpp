// resolve_adapter_dir: a LoRA adapter named by a Hub repo id. Unlike a model (resolve_model_dir, the
// default file set, config.json), an adapter repo needs two files: adapter_config.json and the
// adapter's weights, adapter_model.safetensors or else adapter_model.bin (the pickle is checked by the
// loader's safe reader, not here). Nothing else of the repo (README, training logs, checkpoints of
// other steps, optimizer states) is fetched.
#include "engine/hub/adapter_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "engine/common/log.h"
#include "engine/hub/cache.h"
#include "engine/hub/hub.h"

namespace fs = std::filesystem;

namespace cypris::hub {
namespace {

constexpr const char* kConfig = "adapter_config.json";
constexpr const char* kSafetensors = "adapter_model.safetensors";
constexpr const char* kBin = "adapter_model.bin";

// The cached snapshot of repo at revision when it holds an adapter ("" and why not otherwise).
std::string cached_adapter(const HubSettings& s, const std::string& repo, const std::string& rev, std::string& why) {
  const std::string repo_dir = repo_cache_dir(s.cache_dir, repo);
  const auto commit = cached_commit(repo_dir, rev);
  if (!commit) {
    why = fmt::format("revision '{}' of '{}' is not in the cache {}", rev, repo, s.cache_dir);
    return "";
  }
  const fs::path snap = fs::path(repo_dir) / "snapshots" / *commit;
  std::error_code ec;
  // fs::exists follows the snapshot's symlink: a blob that vanished counts as missing.
  if (!fs::exists(snap / kConfig, ec)) {
    why = fmt::format("file '{}' of '{}' is not in {}", kConfig, repo, snap.string());
    return "";
  }
  if (!fs::exists(snap / kSafetensors, ec) && !fs::exists(snap / kBin, ec)) {
    why = fmt::format("neither '{}' nor '{}' of '{}' is in {}", kSafetensors, kBin, repo, snap.string());
    return "";
  }
  return snap.string();
}

}  // namespace

std::string resolve_adapter_dir(const std::string& path_or_repo, bool allow_download) {
  std::error_code ec;
  if (!path_or_repo.empty() && fs::exists(path_or_repo, ec)) return path_or_repo;
  std::string repo = path_or_repo, rev = "main";
  if (const size_t at = path_or_repo.rfind('@'); at != std::string::npos) {
    repo = path_or_repo.substr(0, at);
    rev = path_or_repo.substr(at + 1);
  }
  const bool looks_like_path = repo.empty() || repo.front() == '/' || repo.front() == '.' || repo.front() == '~' ||
                               std::count(repo.begin(), repo.end(), '/') != 1;
  if (looks_like_path) {
    throw HubError(HubErrorKind::BadInput,
                   fmt::format("LoRA adapter path '{}' does not exist: not a folder or .gguf file here, nor a "
                               "Hugging Face repo id ('org/name' or 'org/name@revision')",
                               path_or_repo));
  }
  if (rev.empty()) {
    throw HubError(HubErrorKind::BadInput,
                   fmt::format("LoRA adapter '{}': nothing after '@' (expected 'org/name@revision')", path_or_repo));
  }
  validate_repo_id(repo);
  validate_revision(rev);
  HubClient client(settings_from_env());
  const HubSettings& s = client.settings();
  std::string why;
  const std::string cached = cached_adapter(s, repo, rev, why);
  if (allow_download && !s.offline) {
    try {
      const std::string commit = client.resolve_revision(repo, rev);
      bool has_config = false, has_st = false, has_bin = false;
      for (const RepoFile& f : client.list_files(repo, commit)) {
        has_config |= f.path == kConfig;
        has_st |= f.path == kSafetensors;
        has_bin |= f.path == kBin;
      }
      if (!has_config || (!has_st && !has_bin)) {
        throw HubError(HubErrorKind::EntryNotFound,
                       fmt::format("'{}' at '{}' is not a PEFT LoRA adapter: it has no {} (a LoRA adapter repo holds "
                                   "adapter_config.json and adapter_model.safetensors or adapter_model.bin)",
                                   repo, rev, has_config ? "adapter_model.safetensors or adapter_model.bin" : kConfig));
      }
      DownloadOptions opt;
      opt.revision = rev;
      opt.include = {kConfig, has_st ? kSafetensors : kBin};
      return client.snapshot_download(repo, opt).path;
    } catch (const HubError& e) {
      const bool unreachable =
          e.kind() == HubErrorKind::Network || (e.kind() == HubErrorKind::Http && e.http_status() >= 500);
      if (unreachable && !cached.empty()) {
        LOG_WARN("hub: {}; using the cached adapter in {}", e.what(), cached);
        return cached;
      }
      throw;
    }
  }
  if (!cached.empty()) return cached;
  throw HubError(HubErrorKind::NotCached,
                 fmt::format("LoRA adapter '{}': {}: {}; run `cypris download {}{} --include adapter_*` while online",
                             path_or_repo, s.offline ? "offline mode (HF_HUB_OFFLINE) is on" : "downloads are disabled",
                             why, repo, rev == "main" ? "" : " --revision " + rev));
}

}  // namespace cypris::hub
