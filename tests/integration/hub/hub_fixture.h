// Shared fixture for the hub integration tests: a temp folder with repos for the fake hub, an
// empty cache, and HubSettings pointing at the fake hub with fast retries.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "engine/hub/hub.h"
#include "tests/support/fake_hub.h"

namespace cypris::test {

namespace fs = std::filesystem;

inline std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class HubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "cypris-hub-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
    repos_ = tmp_ / "repos";
    cache_ = tmp_ / "cache";
    fs::create_directories(repos_);
    hub_ = std::make_unique<FakeHub>(repos_.string());
    hub_->start();
  }
  void TearDown() override {
    hub_->stop();
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  hub::HubSettings settings(const std::string& token = "") const {
    hub::HubSettings s;
    s.endpoint = hub_->endpoint();
    s.cache_dir = cache_.string();
    s.token = token;
    s.offline = false;
    s.retry.max_retries = 5;
    s.retry.base_delay_ms = 5;
    s.retry.max_delay_ms = 40;
    s.retry.max_retry_after_ms = 50;
    return s;
  }

  // org/tiny: v1.0 = first commit, main = second (config and weights changed, a sub folder added).
  void make_tiny_repo() {
    FakeRepoSpec spec;
    spec.id = "org/tiny";
    weights0_ = random_bytes(300 * 1024, 1);
    weights1_ = random_bytes(300 * 1024 + 123, 2);
    tokenizer_ = "{\"model\": {\"type\": \"BPE\"}}";
    spec.commits.push_back({"initial",
                            {{"config.json", "{\"v\": 1}", false},
                             {"tokenizer.json", tokenizer_, false},
                             {"model.safetensors", weights0_, true},
                             {"README.md", "# tiny\n", false}}});
    spec.commits.push_back({"update",
                            {{"config.json", "{\"v\": 2}", false},
                             {"tokenizer.json", tokenizer_, false},
                             {"model.safetensors", weights1_, true},
                             {"sub/extra.json", "{\"extra\": true}", false},
                             {"README.md", "# tiny\n", false}}});
    spec.branches = {{"main", 1}, {"dev", 0}, {"feature/x", 0}};
    spec.tags = {{"v1.0", 0}};
    spec.downloads = 10;
    commits_ = write_fake_repo(repos_.string(), spec);
  }

  fs::path repo_dir(const std::string& folder = "models--org--tiny") const { return cache_ / folder; }

  size_t cdn_gets() const {
    return hub_->count_requests([](const FakeRequest& r) { return r.server == "cdn" && r.method == "GET"; });
  }
  size_t body_gets() const {
    return hub_->count_requests([](const FakeRequest& r) {
      return r.method == "GET" && (r.server == "cdn" || r.target.find("/resolve/") != std::string::npos);
    });
  }

  fs::path tmp_, repos_, cache_;
  std::unique_ptr<FakeHub> hub_;
  std::vector<std::string> commits_;
  std::string weights0_, weights1_, tokenizer_;
};

}  // namespace cypris::test
