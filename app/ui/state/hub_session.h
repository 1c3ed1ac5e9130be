// The Models panel's controller: hub search -> repo -> revision -> files (with sizes) -> chosen
// files -> download (progress, rate, ETA, cancel), and the local cache (list, delete). Every hub
// call runs on a worker; results come back through the UiQueue. Each step's error is kept for the
// panel to show.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "app/ui/state/background_jobs.h"
#include "app/ui/state/download_progress.h"
#include "app/ui/state/gguf_choice.h"
#include "app/ui/state/services.h"
#include "app/ui/state/ui_queue.h"

namespace cypris {

class HubSession {
 public:
  HubSession(AppServices& services, UiQueue& queue, BackgroundJobs& jobs, std::function<double()> now_s);

  // Search.
  void search(const std::string& query);
  bool searching() const { return searching_; }
  const std::vector<HubModelSummary>& results() const { return results_; }
  const std::string& search_error() const { return search_error_; }

  // Repo and revision: selecting a repo lists its refs and the files of "main"; selecting a
  // revision (a ref name or a commit typed by the user) lists its files.
  void select_repo(const std::string& repo);
  void select_revision(const std::string& revision);
  const std::string& repo() const { return repo_; }
  const std::string& revision() const { return revision_; }
  const std::vector<HubRef>& refs() const { return refs_; }
  const std::vector<HubFile>& files() const { return files_; }
  bool listing() const { return listing_ > 0; }
  const std::string& list_error() const { return list_error_; }

  // File choice. After a listing, the files a model needs are chosen: config and tokenizer files,
  // and the weights (*.safetensors preferred over *.bin / *.pt when both exist).
  std::set<std::string>& chosen() { return chosen_; }
  int64_t chosen_bytes() const;  // -1 when a chosen file's size is unknown
  static std::set<std::string> default_choice(const std::vector<HubFile>& files);

  // GGUF repos: the model files on offer (quant type, size) and the one picked, whose parts
  // become the chosen files (only they are downloaded; downloaded_path() is then the file).
  const std::vector<GgufChoice>& gguf_files() const { return gguf_; }
  int gguf_pick() const { return gguf_pick_; }
  void pick_gguf(int index);

  // Download.
  void download();
  void cancel_download();
  bool downloading() const { return downloading_; }
  const DownloadProgress& progress() const { return progress_; }
  const std::string& download_error() const { return download_error_; }
  const std::string& downloaded_path() const { return downloaded_path_; }  // snapshot folder or GGUF file
  std::function<void(const std::string& path)> on_downloaded;

  // Cache.
  void refresh_cache();
  void delete_cached(const std::string& repo, const std::string& revision);
  const std::vector<CachedModel>& cache() const { return cache_; }
  const std::string& cache_error() const { return cache_error_; }

 private:
  AppServices& services_;
  UiQueue& queue_;
  BackgroundJobs& jobs_;
  std::function<double()> now_s_;
  bool searching_ = false;
  uint64_t search_gen_ = 0;
  std::vector<HubModelSummary> results_;
  std::string search_error_;
  std::string repo_, revision_;
  std::vector<HubRef> refs_;
  std::vector<HubFile> files_;
  int listing_ = 0;
  uint64_t list_gen_ = 0;
  std::string list_error_;
  std::set<std::string> chosen_;
  std::vector<GgufChoice> gguf_;
  int gguf_pick_ = -1;
  bool downloading_ = false;
  std::shared_ptr<std::atomic<bool>> cancel_;
  DownloadProgress progress_;
  std::string download_error_;
  std::string downloaded_path_;
  std::vector<CachedModel> cache_;
  uint64_t cache_gen_ = 0;  // refreshes can finish out of order: only the newest result counts
  std::string cache_error_;
};

}  // namespace cypris
