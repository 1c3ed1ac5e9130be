// Failure handling against the fake hub: dropped connections and resume, corruption, 429/503
// retries, servers that ignore Range, parallel chunks, cancel, errors from X-Error-Code, gated
// repos, offline mode, the free-space check, and concurrent downloads (threads and processes).
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "tests/integration/hub/hub_fixture.h"

namespace cypris::test {
namespace {

using hub::DownloadOptions;
using hub::HubClient;
using hub::HubError;
using hub::HubErrorKind;

HubErrorKind kind_of(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const HubError& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no HubError thrown";
  return HubErrorKind::Io;
}

DownloadOptions weights_only() {
  DownloadOptions opt;
  opt.include = {"model.safetensors"};
  return opt;
}

TEST_F(HubTest, ResumesAfterDroppedConnection) {
  make_tiny_repo();
  hub_->faults().drop_after_bytes = 100000;
  hub_->faults().drop_count = 1;
  HubClient client(settings());
  auto res = client.snapshot_download("org/tiny", weights_only());
  EXPECT_EQ(slurp(fs::path(res.path) / "model.safetensors"), weights1_);
  // The retry asked only for the rest of the file.
  EXPECT_EQ(hub_->count_requests([&](const FakeRequest& r) {
    return r.server == "cdn" && r.range == fmt::format("bytes=100000-{}", weights1_.size() - 1);
  }),
            1u);
  EXPECT_EQ(res.bytes_downloaded, weights1_.size());
}

TEST_F(HubTest, CancelThenResumeFetchesOnlyMissingChunks) {
  make_tiny_repo();
  std::atomic<bool> cancel{false};
  DownloadOptions opt = weights_only();
  opt.parallel = 1;
  opt.chunk_size = 64 * 1024;
  opt.parallel_threshold = 0;
  opt.progress_interval_ms = 0;
  opt.cancel = &cancel;
  bool saw_progress = false;
  opt.on_progress = [&](const hub::DownloadProgress& p) {
    if (p.event == hub::DownloadProgress::Event::Progress && p.file == "model.safetensors") {
      saw_progress = true;
      EXPECT_EQ(p.file_total, weights1_.size());
      EXPECT_LE(p.file_done, p.file_total);
      if (p.file_done >= 150000) cancel = true;
    }
  };
  HubClient client(settings());
  EXPECT_EQ(kind_of([&] { client.snapshot_download("org/tiny", opt); }), HubErrorKind::Cancelled);
  EXPECT_TRUE(saw_progress);
  // Nothing half-written is published.
  fs::path snap = repo_dir() / "snapshots" / commits_[1];
  EXPECT_FALSE(fs::exists(snap / "model.safetensors"));
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / fake_sha256_hex(weights1_)));

  hub_->clear_requests();
  cancel = false;
  opt.on_progress = nullptr;
  auto res = client.snapshot_download("org/tiny", opt);
  EXPECT_EQ(slurp(snap / "model.safetensors"), weights1_);
  // Chunks 0 and 1 (and maybe 2) were kept: the first request starts at a chunk boundary past them.
  auto reqs = hub_->requests();
  std::vector<std::string> ranges;
  for (const auto& r : reqs) {
    if (r.server == "cdn") ranges.push_back(r.range);
  }
  ASSERT_FALSE(ranges.empty());
  EXPECT_TRUE(ranges[0] == "bytes=131072-196607" || ranges[0] == "bytes=196608-262143") << ranges[0];
  EXPECT_LT(res.bytes_downloaded, weights1_.size() - 131072 + 1);
}

TEST_F(HubTest, ParallelChunksAssembleTheFile) {
  make_tiny_repo();
  DownloadOptions opt = weights_only();
  opt.parallel = 4;
  opt.chunk_size = 32 * 1024;
  opt.parallel_threshold = 0;
  HubClient client(settings());
  auto res = client.snapshot_download("org/tiny", opt);
  EXPECT_EQ(slurp(fs::path(res.path) / "model.safetensors"), weights1_);
  EXPECT_EQ(cdn_gets(), (weights1_.size() + 32 * 1024 - 1) / (32 * 1024));
  // The CDN is another origin: the token must not travel there.
}

TEST_F(HubTest, ServerIgnoringRangeStillGivesTheRightFile) {
  make_tiny_repo();
  hub_->faults().ignore_range = true;
  hub_->faults().drop_after_bytes = 50000;
  hub_->faults().drop_count = 1;
  DownloadOptions opt = weights_only();
  opt.parallel = 3;
  opt.chunk_size = 64 * 1024;
  opt.parallel_threshold = 0;
  HubClient client(settings());
  auto res = client.snapshot_download("org/tiny", opt);
  EXPECT_EQ(slurp(fs::path(res.path) / "model.safetensors"), weights1_);
}

TEST_F(HubTest, CorruptionIsDetectedAndRetried) {
  make_tiny_repo();
  hub_->faults().corrupt_count = 1;
  HubClient client(settings());
  auto res = client.snapshot_download("org/tiny", weights_only());
  EXPECT_EQ(slurp(fs::path(res.path) / "model.safetensors"), weights1_);
  EXPECT_EQ(cdn_gets(), 2u);
}

TEST_F(HubTest, CorruptionOfSmallGitFileIsDetected) {
  make_tiny_repo();
  hub_->faults().corrupt_always = true;
  HubClient client(settings());
  DownloadOptions opt;
  opt.include = {"config.json"};
  std::string msg;
  EXPECT_EQ(kind_of([&] { client.snapshot_download("org/tiny", opt); }, &msg), HubErrorKind::Integrity);
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(repo_dir() / "snapshots" / commits_[1] / "config.json"));
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / fake_git_blob_sha1("{\"v\": 2}")));
}

TEST_F(HubTest, ExpiredCdnUrlIsRenewed) {
  make_tiny_repo();
  hub_->faults().cdn_expired_count = 1;
  HubClient client(settings());
  auto res = client.snapshot_download("org/tiny", weights_only());
  EXPECT_EQ(slurp(fs::path(res.path) / "model.safetensors"), weights1_);
  EXPECT_EQ(hub_->count_requests([](const FakeRequest& r) {
    return r.method == "HEAD" && r.target.find("model.safetensors") != std::string::npos;
  }),
            2u);
}

TEST_F(HubTest, RetriesOn429And503) {
  make_tiny_repo();
  hub_->faults().rate_limit_count = 2;
  hub_->faults().server_error_count = 1;
  hub_->faults().api_rate_limit_count = 1;
  HubClient client(settings());
  auto res = client.snapshot_download("org/tiny", weights_only());
  EXPECT_EQ(slurp(fs::path(res.path) / "model.safetensors"), weights1_);
  EXPECT_EQ(hub_->count_requests([](const FakeRequest& r) { return r.status == 429; }), 3u);
  EXPECT_EQ(hub_->count_requests([](const FakeRequest& r) { return r.status == 503; }), 1u);
}

TEST_F(HubTest, GivesUpAfterTooManyFailures) {
  make_tiny_repo();
  hub_->faults().server_error_count = 100;
  auto s = settings();
  s.retry.max_retries = 2;
  HubClient client(s);
  std::string msg;
  EXPECT_EQ(kind_of([&] { client.snapshot_download("org/tiny", weights_only()); }, &msg), HubErrorKind::Http);
  EXPECT_NE(msg.find("503"), std::string::npos) << msg;
  EXPECT_EQ(hub_->count_requests([](const FakeRequest& r) { return r.status == 503; }), 3u);
}

TEST_F(HubTest, ErrorsForMissingRepoRevisionAndConnection) {
  make_tiny_repo();
  HubClient client(settings());
  std::string msg;
  EXPECT_EQ(kind_of([&] { client.snapshot_download("org/absent", DownloadOptions{}); }, &msg),
            HubErrorKind::RepoNotFound);
  EXPECT_NE(msg.find("org/absent"), std::string::npos) << msg;
  DownloadOptions opt;
  opt.revision = "no-such-branch";
  EXPECT_EQ(kind_of([&] { client.snapshot_download("org/tiny", opt); }, &msg), HubErrorKind::RevisionNotFound);
  EXPECT_NE(msg.find("no-such-branch"), std::string::npos) << msg;
  EXPECT_EQ(kind_of([&] { client.list_refs("bad//id"); }), HubErrorKind::BadInput);
  EXPECT_EQ(kind_of([&] { client.list_refs("../etc"); }), HubErrorKind::BadInput);

  // Nothing listens on the port any more.
  auto s = settings();
  hub_->stop();
  s.retry.max_retries = 1;
  HubClient gone(s);
  EXPECT_EQ(kind_of([&] { gone.snapshot_download("org/tiny", DownloadOptions{}); }), HubErrorKind::Network);
}

TEST_F(HubTest, MalformedApiAnswersAreErrorsNotCrashes) {
  make_tiny_repo();
  HubClient client(settings());
  std::string msg;
  hub_->faults().api_malformed_count = 1;
  EXPECT_EQ(kind_of([&] { client.snapshot_download("org/tiny", DownloadOptions{}); }, &msg), HubErrorKind::Http);
  EXPECT_NE(msg.find("org/tiny"), std::string::npos) << msg;
  hub_->faults().api_malformed_count = 1;
  EXPECT_EQ(kind_of([&] { client.list_refs("org/tiny"); }), HubErrorKind::Http);
  hub_->faults().api_malformed_count = 1;
  EXPECT_EQ(kind_of([&] { client.list_files("org/tiny", "main"); }), HubErrorKind::Http);
  hub_->faults().api_malformed_count = 1;
  EXPECT_EQ(kind_of([&] { client.search_models(hub::SearchQuery{}); }), HubErrorKind::Http);
  // And the client still works afterwards.
  EXPECT_EQ(client.list_refs("org/tiny").tags.size(), 1u);
}

TEST_F(HubTest, GatedRepoNeedsTheRightToken) {
  FakeRepoSpec spec;
  spec.id = "org/gated";
  spec.commits.push_back({"init", {{"config.json", "{}", false}, {"model.safetensors", random_bytes(5000, 3), true}}});
  spec.branches = {{"main", 0}};
  spec.gated = true;
  spec.access_token = "hf_good";
  write_fake_repo(repos_.string(), spec);

  std::string msg;
  HubClient anonymous(settings());
  EXPECT_EQ(kind_of([&] { anonymous.snapshot_download("org/gated", DownloadOptions{}); }, &msg),
            HubErrorKind::GatedRepo);
  EXPECT_NE(msg.find("org/gated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("log in"), std::string::npos) << msg;
  HubClient wrong(settings("hf_wrong"));
  try {
    wrong.snapshot_download("org/gated", DownloadOptions{});
    FAIL();
  } catch (const HubError& e) {
    EXPECT_EQ(e.kind(), HubErrorKind::GatedRepo);
    EXPECT_EQ(e.http_status(), 403);
  }
  hub_->clear_requests();
  HubClient good(settings("hf_good"));
  auto res = good.snapshot_download("org/gated", DownloadOptions{});
  EXPECT_EQ(slurp(fs::path(res.path) / "model.safetensors"), random_bytes(5000, 3));
  // The token goes to the hub but never to the CDN (another origin).
  EXPECT_GT(hub_->count_requests(
                [](const FakeRequest& r) { return r.server == "hub" && r.authorization == "Bearer hf_good"; }),
            0u);
  EXPECT_EQ(hub_->count_requests([](const FakeRequest& r) { return r.server == "cdn" && !r.authorization.empty(); }),
            0u);
  EXPECT_EQ(cdn_gets(), 1u);
}

TEST_F(HubTest, OfflineModeServesOnlyTheCache) {
  make_tiny_repo();
  HubClient online(settings());
  auto first = online.snapshot_download("org/tiny", DownloadOptions{});
  auto s = settings();
  s.offline = true;
  HubClient offline(s);
  hub_->clear_requests();
  auto res = offline.snapshot_download("org/tiny", DownloadOptions{});
  EXPECT_EQ(res.path, first.path);
  EXPECT_EQ(res.commit, commits_[1]);
  EXPECT_TRUE(hub_->requests().empty());
  DownloadOptions tag;
  tag.revision = "v1.0";
  std::string msg;
  EXPECT_EQ(kind_of([&] { offline.snapshot_download("org/tiny", tag); }, &msg), HubErrorKind::NotCached);
  EXPECT_NE(msg.find("v1.0"), std::string::npos) << msg;
  EXPECT_EQ(kind_of([&] { offline.snapshot_download("org/other", DownloadOptions{}); }), HubErrorKind::NotCached);
  DownloadOptions gguf;
  gguf.include = {"*.gguf"};
  EXPECT_EQ(kind_of([&] { offline.snapshot_download("org/tiny", gguf); }), HubErrorKind::NotCached);
  EXPECT_EQ(kind_of([&] { offline.list_refs("org/tiny"); }), HubErrorKind::NotCached);
  EXPECT_TRUE(hub_->requests().empty());
}

TEST_F(HubTest, FreeSpaceIsCheckedBeforeStarting) {
  make_tiny_repo();
  DownloadOptions opt;
  opt.reserve_bytes = uint64_t{1} << 62;
  HubClient client(settings());
  std::string msg;
  EXPECT_EQ(kind_of([&] { client.snapshot_download("org/tiny", opt); }, &msg), HubErrorKind::DiskFull);
  EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  EXPECT_EQ(body_gets(), 0u);
}

void expect_single_clean_blob_set(const HubTest& t, const fs::path& repo, const std::string& weights) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(repo / "blobs")) names.insert(e.path().filename().string());
  EXPECT_EQ(names.size(), 4u);  // config, tokenizer, weights, sub/extra.json
  EXPECT_TRUE(names.count(fake_sha256_hex(weights)));
  for (const auto& n : names) EXPECT_EQ(n.find('.'), std::string::npos) << "leftover " << n;
  EXPECT_EQ(slurp(repo / "blobs" / fake_sha256_hex(weights)), weights);
}

TEST_F(HubTest, TwoThreadsDownloadingOneRepoShareOneBlob) {
  make_tiny_repo();
  std::string path[2];
  std::string error[2];
  auto run = [&](int i) {
    try {
      HubClient client(settings());
      path[i] = client.snapshot_download("org/tiny", DownloadOptions{}).path;
    } catch (const std::exception& e) {
      error[i] = e.what();
    }
  };
  std::thread a(run, 0), b(run, 1);
  a.join();
  b.join();
  EXPECT_EQ(error[0], "");
  EXPECT_EQ(error[1], "");
  EXPECT_EQ(path[0], path[1]);
  EXPECT_EQ(slurp(fs::path(path[0]) / "model.safetensors"), weights1_);
  expect_single_clean_blob_set(*this, repo_dir(), weights1_);
  // The lock makes the second downloader find the finished blob instead of fetching it again.
  EXPECT_EQ(cdn_gets(), 1u);
}

TEST_F(HubTest, TwoProcessesDownloadingOneRepoShareOneBlob) {
  make_tiny_repo();
  auto s = settings();
  pid_t kids[2];
  for (auto& kid : kids) {
    kid = ::fork();
    ASSERT_GE(kid, 0);
    if (kid == 0) {
      int rc = 1;
      try {
        HubClient client(s);
        auto res = client.snapshot_download("org/tiny", DownloadOptions{});
        rc = slurp(fs::path(res.path) / "model.safetensors") == weights1_ ? 0 : 3;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
        rc = 2;
      }
      ::_exit(rc);
    }
  }
  for (pid_t kid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(kid, &status, 0), kid);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  expect_single_clean_blob_set(*this, repo_dir(), weights1_);
  EXPECT_EQ(cdn_gets(), 1u);
}

}  // namespace
}  // namespace cypris::test
