// Downloads from the fake hub: revisions (branch, tag, commit), the cache layout Python expects,
// listing APIs, globs, the plain download folder, the CLI and resolve_model_dir.
#include <cstdlib>

#include "app/cli/commands.h"
#include "tests/integration/hub/hub_fixture.h"
#include "tests/support/scoped_env.h"

namespace cypris::test {
namespace {

using hub::DownloadOptions;
using hub::HubClient;

TEST_F(HubTest, DownloadByBranchBuildsPythonCacheLayout) {
  make_tiny_repo();
  HubClient client(settings());
  DownloadOptions opt;
  opt.progress_interval_ms = 0;
  std::vector<hub::DownloadProgress> events;
  opt.on_progress = [&](const hub::DownloadProgress& p) { events.push_back(p); };
  auto res = client.snapshot_download("org/tiny", opt);
  const std::string main = commits_[1];
  // Progress: totals over the 4 selected files, never going backwards, ending complete.
  const uint64_t total = weights1_.size() + tokenizer_.size() + 8 + 15;
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, hub::DownloadProgress::Event::Finished);
  EXPECT_EQ(events.back().done, total);
  EXPECT_EQ(events.back().files_done, 4u);
  size_t finished = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].total, total);
    EXPECT_EQ(events[i].files_total, 4u);
    if (i > 0) EXPECT_GE(events[i].done, events[i - 1].done);
    if (events[i].event == hub::DownloadProgress::Event::FileFinished) {
      ++finished;
      EXPECT_EQ(events[i].file_done, events[i].file_total) << events[i].file;
    }
  }
  EXPECT_EQ(finished, 4u);
  // Every fetched file is verified before it is published.
  EXPECT_EQ(std::count_if(events.begin(), events.end(),
                          [](const auto& e) { return e.event == hub::DownloadProgress::Event::Verifying; }),
            4);
  EXPECT_EQ(res.commit, main);
  EXPECT_EQ(fs::path(res.path), repo_dir() / "snapshots" / main);

  // refs/main holds the commit without a newline.
  EXPECT_EQ(slurp(repo_dir() / "refs" / "main"), main);
  // Default selection: weights, json configs, tokenizer; README.md is not part of it.
  fs::path snap = res.path;
  EXPECT_EQ(slurp(snap / "config.json"), "{\"v\": 2}");
  EXPECT_EQ(slurp(snap / "tokenizer.json"), tokenizer_);
  EXPECT_EQ(slurp(snap / "model.safetensors"), weights1_);
  EXPECT_EQ(slurp(snap / "sub" / "extra.json"), "{\"extra\": true}");
  EXPECT_FALSE(fs::exists(snap / "README.md"));

  // Relative symlinks into blobs/ named by the etag: git sha1 for small files, sha256 for LFS.
  EXPECT_EQ(fs::read_symlink(snap / "config.json").string(), "../../blobs/" + fake_git_blob_sha1("{\"v\": 2}"));
  EXPECT_EQ(fs::read_symlink(snap / "model.safetensors").string(), "../../blobs/" + fake_sha256_hex(weights1_));
  EXPECT_EQ(fs::read_symlink(snap / "sub" / "extra.json").string(),
            "../../../blobs/" + fake_git_blob_sha1("{\"extra\": true}"));
  EXPECT_EQ(slurp(repo_dir() / "blobs" / fake_sha256_hex(weights1_)), weights1_);
  // Nothing but finished blobs in blobs/.
  for (const auto& e : fs::directory_iterator(repo_dir() / "blobs")) {
    std::string name = e.path().filename().string();
    EXPECT_TRUE(name.size() == 40 || name.size() == 64) << name;
  }
  EXPECT_TRUE(fs::exists(cache_ / "CACHEDIR.TAG"));
  EXPECT_EQ(res.files.size(), 4u);
  EXPECT_EQ(res.bytes_downloaded, weights1_.size() + tokenizer_.size() + 8 + 15);
}

TEST_F(HubTest, DownloadByTagAndByCommit) {
  make_tiny_repo();
  HubClient client(settings());
  DownloadOptions by_tag;
  by_tag.revision = "v1.0";
  auto res = client.snapshot_download("org/tiny", by_tag);
  EXPECT_EQ(res.commit, commits_[0]);
  EXPECT_EQ(slurp(repo_dir() / "refs" / "v1.0"), commits_[0]);
  EXPECT_EQ(slurp(fs::path(res.path) / "config.json"), "{\"v\": 1}");
  EXPECT_EQ(slurp(fs::path(res.path) / "model.safetensors"), weights0_);
  EXPECT_FALSE(fs::exists(fs::path(res.path) / "sub"));

  // A branch with a slash is sent encoded (feature%2Fx) and its ref is a nested file.
  DownloadOptions by_slash_branch;
  by_slash_branch.revision = "feature/x";
  EXPECT_EQ(client.snapshot_download("org/tiny", by_slash_branch).path, res.path);
  EXPECT_EQ(slurp(repo_dir() / "refs" / "feature" / "x"), commits_[0]);

  DownloadOptions by_commit;
  by_commit.revision = commits_[1];
  auto res2 = client.snapshot_download("org/tiny", by_commit);
  EXPECT_EQ(res2.commit, commits_[1]);
  EXPECT_EQ(slurp(fs::path(res2.path) / "config.json"), "{\"v\": 2}");
  // A full commit hash gets no ref file; the tag's ref is untouched.
  EXPECT_FALSE(fs::exists(repo_dir() / "refs" / commits_[1]));
  EXPECT_EQ(slurp(repo_dir() / "refs" / "v1.0"), commits_[0]);
  // The unchanged tokenizer is one blob shared by both snapshots.
  EXPECT_EQ(fs::read_symlink(fs::path(res.path) / "tokenizer.json"),
            fs::read_symlink(fs::path(res2.path) / "tokenizer.json"));
}

TEST_F(HubTest, SecondDownloadFetchesNothing) {
  make_tiny_repo();
  HubClient client(settings());
  client.snapshot_download("org/tiny", DownloadOptions{});
  hub_->clear_requests();
  auto res = client.snapshot_download("org/tiny", DownloadOptions{});
  EXPECT_EQ(res.bytes_downloaded, 0u);
  EXPECT_EQ(body_gets(), 0u);
  EXPECT_EQ(hub_->count_requests([](const FakeRequest& r) { return r.method == "HEAD"; }), 0u);
}

TEST_F(HubTest, ListRefsResolveAndFiles) {
  make_tiny_repo();
  HubClient client(settings());
  auto refs = client.list_refs("org/tiny");
  ASSERT_EQ(refs.branches.size(), 3u);
  ASSERT_EQ(refs.tags.size(), 1u);
  EXPECT_EQ(refs.tags[0].name, "v1.0");
  EXPECT_EQ(refs.tags[0].ref, "refs/tags/v1.0");
  EXPECT_EQ(refs.tags[0].target_commit, commits_[0]);
  for (const auto& b : refs.branches) EXPECT_EQ(b.target_commit, b.name == "main" ? commits_[1] : commits_[0]);
  EXPECT_EQ(client.resolve_revision("org/tiny", "dev"), commits_[0]);
  EXPECT_EQ(client.resolve_revision("org/tiny", commits_[1]), commits_[1]);

  auto files = client.list_files("org/tiny", "main");
  ASSERT_EQ(files.size(), 5u);
  std::map<std::string, hub::RepoFile> by_path;
  for (const auto& f : files) by_path[f.path] = f;
  EXPECT_EQ(by_path.at("model.safetensors").size, weights1_.size());
  EXPECT_EQ(by_path.at("model.safetensors").lfs_sha256, fake_sha256_hex(weights1_));
  EXPECT_EQ(by_path.at("config.json").oid, fake_git_blob_sha1("{\"v\": 2}"));
  EXPECT_TRUE(by_path.at("config.json").lfs_sha256.empty());
  EXPECT_EQ(by_path.at("sub/extra.json").size, 15u);
}

TEST_F(HubTest, TreePaginationFollowsLinkHeaders) {
  FakeRepoSpec spec;
  spec.id = "org/many";
  FakeCommit c{"many files", {}};
  for (int i = 0; i < 23; ++i) c.files.push_back({fmt::format("shards/part-{:02}.json", i), std::to_string(i), false});
  spec.commits.push_back(c);
  spec.branches = {{"main", 0}};
  write_fake_repo(repos_.string(), spec);
  hub_->set_page_size(5);
  HubClient client(settings());
  auto files = client.list_files("org/many", "main");
  EXPECT_EQ(files.size(), 23u);  // the folder entry is not a file
  // 24 entries (23 files + the folder) in pages of 5.
  EXPECT_EQ(hub_->count_requests([](const FakeRequest& r) { return r.target.find("/tree/") != std::string::npos; }),
            5u);
  auto res = client.snapshot_download("org/many", DownloadOptions{});
  EXPECT_EQ(res.files.size(), 23u);
  EXPECT_EQ(slurp(fs::path(res.path) / "shards" / "part-22.json"), "22");
}

TEST_F(HubTest, SearchModelsFiltersAndPages) {
  make_tiny_repo();
  for (const char* id : {"org/tiny-chat", "other/big"}) {
    FakeRepoSpec spec;
    spec.id = id;
    spec.commits.push_back({"init", {{"config.json", "{}", false}}});
    spec.branches = {{"main", 0}};
    spec.downloads = std::string(id) == "org/tiny-chat" ? 99 : 5;
    write_fake_repo(repos_.string(), spec);
  }
  hub_->set_page_size(1);
  HubClient client(settings());
  hub::SearchQuery q;
  q.search = "tiny";
  auto found = client.search_models(q);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].id, "org/tiny-chat");  // sorted by downloads
  EXPECT_EQ(found[0].author, "org");
  EXPECT_EQ(found[1].id, "org/tiny");
  q.search = "";
  q.author = "other";
  found = client.search_models(q);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].id, "other/big");
  q.author = "";
  q.limit = 2;
  EXPECT_EQ(client.search_models(q).size(), 2u);
}

TEST_F(HubTest, IncludeExcludeGlobs) {
  make_tiny_repo();
  HubClient client(settings());
  DownloadOptions opt;
  opt.include = {"*.json", "README.md"};
  opt.exclude = {"sub/"};
  auto res = client.snapshot_download("org/tiny", opt);
  std::set<std::string> got;
  for (const auto& f : res.files) got.insert(f.path);
  EXPECT_EQ(got, (std::set<std::string>{"config.json", "tokenizer.json", "README.md"}));
  EXPECT_TRUE(fs::exists(fs::path(res.path) / "README.md"));
  EXPECT_FALSE(fs::exists(fs::path(res.path) / "model.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(res.path) / "sub"));
  EXPECT_EQ(cdn_gets(), 0u);
}

TEST_F(HubTest, PickleWeightsSkippedOnlyWhenSafetensorsExist) {
  FakeRepoSpec both;
  both.id = "org/both";
  both.commits.push_back({"init",
                          {{"config.json", "{}", false},
                           {"model.safetensors", "SAFE", true},
                           {"pytorch_model.bin", "PICKLE", true},
                           {"original/consolidated.00.pth", "PTH", true}}});
  both.branches = {{"main", 0}};
  write_fake_repo(repos_.string(), both);
  FakeRepoSpec bin_only = both;
  bin_only.id = "org/binonly";
  bin_only.commits[0].files.erase(bin_only.commits[0].files.begin() + 1);
  write_fake_repo(repos_.string(), bin_only);

  HubClient client(settings());
  fs::path p1 = client.snapshot_download("org/both", DownloadOptions{}).path;
  EXPECT_TRUE(fs::exists(p1 / "model.safetensors"));
  EXPECT_FALSE(fs::exists(p1 / "pytorch_model.bin"));
  EXPECT_FALSE(fs::exists(p1 / "original"));
  fs::path p2 = client.snapshot_download("org/binonly", DownloadOptions{}).path;
  EXPECT_EQ(slurp(p2 / "pytorch_model.bin"), "PICKLE");
  EXPECT_EQ(slurp(p2 / "original" / "consolidated.00.pth"), "PTH");
  // An explicit include takes what it names, even next to safetensors.
  DownloadOptions opt;
  opt.include = {"*.bin"};
  fs::path p3 = client.snapshot_download("org/both", opt).path;
  EXPECT_EQ(slurp(p3 / "pytorch_model.bin"), "PICKLE");
}

TEST_F(HubTest, DownloadDirGetsPlainFiles) {
  make_tiny_repo();
  HubClient client(settings());
  DownloadOptions opt;
  opt.download_dir = (tmp_ / "plain").string();
  auto res = client.snapshot_download("org/tiny", opt);
  EXPECT_EQ(fs::path(res.path), tmp_ / "plain");
  EXPECT_FALSE(fs::is_symlink(tmp_ / "plain" / "model.safetensors"));
  EXPECT_EQ(slurp(tmp_ / "plain" / "model.safetensors"), weights1_);
  EXPECT_EQ(slurp(tmp_ / "plain" / "sub" / "extra.json"), "{\"extra\": true}");
  EXPECT_FALSE(fs::exists(repo_dir()));
  hub_->clear_requests();
  client.snapshot_download("org/tiny", opt);
  EXPECT_EQ(body_gets(), 0u);
}

TEST_F(HubTest, DownloadSingleFileAndMissingFile) {
  make_tiny_repo();
  HubClient client(settings());
  DownloadOptions opt;
  opt.revision = "v1.0";
  std::string p = client.download_file("org/tiny", "config.json", opt);
  EXPECT_EQ(fs::path(p), repo_dir() / "snapshots" / commits_[0] / "config.json");
  EXPECT_EQ(slurp(p), "{\"v\": 1}");
  EXPECT_EQ(slurp(repo_dir() / "refs" / "v1.0"), commits_[0]);
  auto off = settings();
  off.offline = true;
  HubClient offline(off);
  EXPECT_EQ(offline.download_file("org/tiny", "config.json", opt), p);
  EXPECT_THROW(offline.download_file("org/tiny", "tokenizer.json", opt), hub::HubError);
  EXPECT_THROW(client.download_file("org/tiny", "../escape", opt), hub::HubError);
  try {
    client.download_file("org/tiny", "nope.json", opt);
    FAIL() << "expected EntryNotFound";
  } catch (const hub::HubError& e) {
    EXPECT_EQ(e.kind(), hub::HubErrorKind::EntryNotFound);
    EXPECT_NE(std::string(e.what()).find("nope.json"), std::string::npos) << e.what();
  }
}

TEST_F(HubTest, EmptyFilesAndFallbackToCacheWhenHubIsDown) {
  FakeRepoSpec spec;
  spec.id = "solo";  // one-segment repo id, like gpt2
  spec.commits.push_back({"init", {{"config.json", "{}", false}, {"added_tokens.json", "", false}}});
  spec.branches = {{"main", 0}};
  write_fake_repo(repos_.string(), spec);
  HubClient client(settings());
  auto res = client.snapshot_download("solo", DownloadOptions{});
  EXPECT_EQ(fs::path(res.path).parent_path().parent_path(), cache_ / "models--solo");
  EXPECT_TRUE(fs::exists(fs::path(res.path) / "added_tokens.json"));
  EXPECT_EQ(fs::file_size(fs::path(res.path) / "added_tokens.json"), 0u);
  EXPECT_EQ(fs::read_symlink(fs::path(res.path) / "added_tokens.json").filename().string(), fake_git_blob_sha1(""));

  hub_->stop();
  auto s = settings();
  s.retry.max_retries = 0;
  HubClient unreachable(s);
  EXPECT_EQ(unreachable.snapshot_download("solo", DownloadOptions{}).path, res.path);
  DownloadOptions other;
  other.revision = "v9";
  EXPECT_THROW(unreachable.snapshot_download("solo", other), hub::HubError);
}

TEST_F(HubTest, RenamedRepoRedirectIsFollowed) {
  make_tiny_repo();
  hub_->add_rename("org/old-name", "org/tiny");
  HubClient client(settings());
  auto res = client.snapshot_download("org/old-name", DownloadOptions{});
  // The cache is keyed by the name the user asked for, as in huggingface_hub.
  EXPECT_EQ(fs::path(res.path), repo_dir("models--org--old-name") / "snapshots" / commits_[1]);
  EXPECT_EQ(slurp(fs::path(res.path) / "model.safetensors"), weights1_);
}

TEST_F(HubTest, RelativeRedirectIsFollowed) {
  make_tiny_repo();
  hub_->faults().relative_redirect = true;
  HubClient client(settings());
  DownloadOptions opt;
  opt.include = {"config.json"};
  auto res = client.snapshot_download("org/tiny", opt);
  EXPECT_EQ(slurp(fs::path(res.path) / "config.json"), "{\"v\": 2}");
  EXPECT_GE(hub_->count_requests([](const FakeRequest& r) { return r.status == 307; }), 1u);
}

using EnvGuard = ScopedEnv;

TEST_F(HubTest, ResolveModelDirDownloadsThenServesOffline) {
  make_tiny_repo();
  EnvGuard e1("HF_ENDPOINT", hub_->endpoint() + "/");
  EnvGuard e2("HF_HUB_CACHE", cache_.string());
  EnvGuard e3("HF_TOKEN", "");
  EnvGuard e4("HF_HUB_OFFLINE", "0");
  fs::create_directories(tmp_ / "local");
  EXPECT_EQ(hub::resolve_model_dir((tmp_ / "local").string()), (tmp_ / "local").string());
  EXPECT_THROW(hub::resolve_model_dir((tmp_ / "missing").string()), hub::HubError);

  std::string dir = hub::resolve_model_dir("org/tiny");
  EXPECT_EQ(fs::path(dir), repo_dir() / "snapshots" / commits_[1]);
  EXPECT_EQ(slurp(fs::path(dir) / "config.json"), "{\"v\": 2}");
  {
    EnvGuard off("HF_HUB_OFFLINE", "1");
    hub_->clear_requests();
    EXPECT_EQ(hub::resolve_model_dir("org/tiny"), dir);
    EXPECT_EQ(hub::resolve_model_dir("org/tiny", commits_[1]), dir);
    EXPECT_TRUE(hub_->requests().empty());
    try {
      hub::resolve_model_dir("org/tiny", "v1.0");
      FAIL() << "v1.0 was never downloaded";
    } catch (const hub::HubError& e) {
      EXPECT_EQ(e.kind(), hub::HubErrorKind::NotCached);
      EXPECT_NE(std::string(e.what()).find("offline"), std::string::npos) << e.what();
    }
    // A file whose blob vanished is reported by name.
    fs::remove(repo_dir() / "blobs" / fake_git_blob_sha1("{\"v\": 2}"));
    try {
      hub::resolve_model_dir("org/tiny");
      FAIL() << "config.json is gone";
    } catch (const hub::HubError& e) {
      EXPECT_EQ(e.kind(), hub::HubErrorKind::NotCached);
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  }
  // Downloads disabled but online: the cache is still consulted, the network is not.
  hub_->clear_requests();
  EXPECT_THROW(hub::resolve_model_dir("org/tiny", "main", "", false), hub::HubError);
  EXPECT_TRUE(hub_->requests().empty());
  // Allowed again: the missing blob comes back.
  EXPECT_EQ(hub::resolve_model_dir("org/tiny"), dir);
  EXPECT_EQ(slurp(fs::path(dir) / "config.json"), "{\"v\": 2}");
}

TEST_F(HubTest, CliDownloadPrintsSnapshotPath) {
  make_tiny_repo();
  EnvGuard e1("HF_ENDPOINT", hub_->endpoint());
  EnvGuard e2("HF_HUB_CACHE", cache_.string());
  EnvGuard e4("HF_HUB_OFFLINE", "0");
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  int rc = cli::run_download({"org/tiny", "--revision", "v1.0", "--include", "*.json", "--exclude", "tok*"});
  std::string out = testing::internal::GetCapturedStdout();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 0) << err;
  fs::path snap = repo_dir() / "snapshots" / commits_[0];
  EXPECT_EQ(out, snap.string() + "\n");
  EXPECT_TRUE(fs::exists(snap / "config.json"));
  EXPECT_FALSE(fs::exists(snap / "tokenizer.json"));
  EXPECT_NE(err.find("download: 1/1 files"), std::string::npos) << err;  // plain lines: stderr is not a TTY

  testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_download({"org/absent"}), 1);
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("not found"), std::string::npos) << err;
  testing::internal::CaptureStderr();
  EXPECT_EQ(cli::run_download({"org/tiny", "--bogus"}), 2);
  testing::internal::GetCapturedStderr();
}

}  // namespace
}  // namespace cypris::test

namespace cypris::test {
namespace {

// --ignore-patterns: the engine passes them to resolve_model_dir; matching files are not fetched.
TEST_F(HubTest, ResolveModelDirSkipsIgnoredFiles) {
  make_tiny_repo();
  EnvGuard e1("HF_ENDPOINT", hub_->endpoint() + "/");
  EnvGuard e2("HF_HUB_CACHE", cache_.string());
  EnvGuard e3("HF_TOKEN", "");
  EnvGuard e4("HF_HUB_OFFLINE", "0");
  const fs::path plain = tmp_ / "plain";
  const std::string dir = hub::resolve_model_dir("org/tiny", "main", plain.string(), true, {"*.safetensors"});
  EXPECT_TRUE(fs::exists(fs::path(dir) / "config.json"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors"));
}

}  // namespace
}  // namespace cypris::test
