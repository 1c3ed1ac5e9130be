// HubSession; see hub_session.h.
#include "app/ui/state/hub_session.h"

#include <exception>

namespace cypris {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string base_name(const std::string& p) {
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

HubSession::HubSession(AppServices& services, UiQueue& queue, BackgroundJobs& jobs, std::function<double()> now_s)
    : services_(services), queue_(queue), jobs_(jobs), now_s_(std::move(now_s)) {}

void HubSession::search(const std::string& query) {
  searching_ = true;
  search_error_.clear();
  const uint64_t gen = ++search_gen_;
  jobs_.run("hub search", [this, query, gen](const std::atomic<bool>&) {
    std::vector<HubModelSummary> r;
    std::string err;
    try {
      r = services_.hub_search(query);
    } catch (const std::exception& e) {
      err = e.what();
    }
    queue_.post([this, r, err, gen] {
      if (gen != search_gen_) return;  // a newer search replaced this one
      searching_ = false;
      results_ = r;
      search_error_ = err;
    });
  });
}

void HubSession::select_repo(const std::string& repo) {
  repo_ = repo;
  refs_.clear();
  list_error_.clear();
  ++listing_;
  const uint64_t gen = ++list_gen_;
  jobs_.run("hub refs", [this, repo, gen](const std::atomic<bool>&) {
    std::vector<HubRef> r;
    std::string err;
    try {
      r = services_.hub_refs(repo);
    } catch (const std::exception& e) {
      err = e.what();
    }
    queue_.post([this, r, err, gen] {
      --listing_;
      if (gen != list_gen_) return;
      refs_ = r;
      if (!err.empty()) list_error_ = err;
      // Not every repo's default branch is "main" (older ones use "master").
      bool has_main = false;
      const HubRef* first_branch = nullptr;
      for (const auto& ref : refs_) {
        if (ref.kind != HubRef::Kind::Branch) continue;
        has_main = has_main || ref.name == "main";
        if (!first_branch) first_branch = &ref;
      }
      if (revision_ == "main" && !has_main && first_branch) {
        list_error_.clear();
        select_revision(first_branch->name);
      }
    });
  });
  select_revision("main");
}

void HubSession::pick_gguf(int index) {
  if (index < 0 || index >= static_cast<int>(gguf_.size())) return;
  gguf_pick_ = index;
  chosen_ = std::set<std::string>(gguf_[index].files.begin(), gguf_[index].files.end());
}

void HubSession::select_revision(const std::string& revision) {
  revision_ = revision;
  files_.clear();
  gguf_.clear();
  gguf_pick_ = -1;
  chosen_.clear();
  ++listing_;
  const uint64_t gen = list_gen_;
  const std::string repo = repo_;
  jobs_.run("hub files", [this, repo, revision, gen](const std::atomic<bool>&) {
    std::vector<HubFile> f;
    std::string err;
    try {
      f = services_.hub_files(repo, revision);
    } catch (const std::exception& e) {
      err = e.what();
    }
    queue_.post([this, f, err, gen, revision] {
      --listing_;
      if (gen != list_gen_ || revision != revision_) return;
      files_ = f;
      chosen_ = default_choice(files_);
      gguf_ = gguf_choices(files_);
      gguf_pick_ = -1;
      // A GGUF repo holds every quantization of the model: one is picked, not all of them.
      if (!gguf_.empty() && chosen_.empty()) pick_gguf(default_gguf_choice(gguf_));
      if (!err.empty()) list_error_ = err;
    });
  });
}

std::set<std::string> HubSession::default_choice(const std::vector<HubFile>& files) {
  bool has_safetensors = false;
  for (const auto& f : files) has_safetensors = has_safetensors || ends_with(f.path, ".safetensors");
  std::set<std::string> out;
  for (const auto& f : files) {
    const std::string name = base_name(f.path);
    bool weights =
        ends_with(name, ".safetensors") || ends_with(name, ".safetensors.index.json") ||
        (!has_safetensors && (ends_with(name, ".bin") || ends_with(name, ".pt") || ends_with(name, ".bin.index.json")));
    bool meta = ends_with(name, ".json") && !ends_with(name, ".bin.index.json");
    bool tokenizer =
        name == "tokenizer.model" || ends_with(name, ".tiktoken") || name == "merges.txt" || name == "vocab.txt";
    // Training artefacts and other formats are left for the user to tick.
    bool other_format = ends_with(name, ".gguf") || ends_with(name, ".onnx") || ends_with(name, ".h5") ||
                        ends_with(name, ".msgpack") || name == "training_args.bin";
    if ((weights || meta || tokenizer) && !other_format) out.insert(f.path);
  }
  return out;
}

int64_t HubSession::chosen_bytes() const {
  int64_t sum = 0;
  for (const auto& f : files_) {
    if (!chosen_.count(f.path)) continue;
    if (f.size < 0) return -1;
    sum += f.size;
  }
  return sum;
}

void HubSession::download() {
  if (downloading_ || repo_.empty() || chosen_.empty()) return;
  std::vector<HubFile> files;
  std::vector<std::string> names;
  for (const auto& f : files_) {
    if (chosen_.count(f.path)) {
      files.push_back(f);
      names.push_back(f.path);
    }
  }
  downloading_ = true;
  download_error_.clear();
  downloaded_path_.clear();
  progress_.start(files, now_s_());
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto cancel = cancel_;
  const std::string repo = repo_, revision = revision_;
  jobs_.run("download", [this, repo, revision, names, cancel](const std::atomic<bool>& stop) {
    std::string path, err;
    try {
      path = services_.hub_download(
          repo, revision, names,
          [&](const FileProgress& p) {
            if (stop) *cancel = true;  // the app is closing
            queue_.post([this, p] { progress_.update(p, now_s_()); });
          },
          *cancel);
    } catch (const std::exception& e) {
      err = *cancel ? "download cancelled" : e.what();
    }
    queue_.post([this, path, err, names] {
      downloading_ = false;
      download_error_ = err;
      // A picked GGUF file is the model itself: the path to load is the file, not the folder.
      std::string model = path;
      if (gguf_pick_ >= 0 && gguf_pick_ < static_cast<int>(gguf_.size()) && !path.empty() &&
          std::set<std::string>(names.begin(), names.end()) ==
              std::set<std::string>(gguf_[gguf_pick_].files.begin(), gguf_[gguf_pick_].files.end())) {
        model = path + "/" + gguf_[gguf_pick_].path;
      }
      downloaded_path_ = err.empty() ? model : "";
      if (err.empty() && on_downloaded) on_downloaded(model);
      refresh_cache();
    });
  });
}

void HubSession::cancel_download() {
  if (cancel_) *cancel_ = true;
}

void HubSession::refresh_cache() {
  const uint64_t gen = ++cache_gen_;
  jobs_.run("cache", [this, gen](const std::atomic<bool>&) {
    std::vector<CachedModel> c;
    std::string err;
    try {
      c = services_.cached_models();
    } catch (const std::exception& e) {
      err = e.what();
    }
    queue_.post([this, c, err, gen] {
      if (gen != cache_gen_) return;
      cache_ = c;
      cache_error_ = err;
    });
  });
}

void HubSession::delete_cached(const std::string& repo, const std::string& revision) {
  jobs_.run("cache delete", [this, repo, revision](const std::atomic<bool>&) {
    std::string err;
    try {
      services_.delete_cached(repo, revision);
    } catch (const std::exception& e) {
      err = e.what();
    }
    queue_.post([this, err] {
      cache_error_ = err;
      refresh_cache();
    });
  });
}

}  // namespace cypris
