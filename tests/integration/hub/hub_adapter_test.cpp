// LoRA adapters named by a Hub repo id (--lora-modules name=org/repo[@revision], /v1/lora/load,
// the desktop picker), from the fake hub: only adapter_config.json and the adapter's weights are
// fetched (safetensors, else the .bin), a revision picks the commit, the cache serves it offline, a
// repo that is no adapter is refused naming the missing file; through the engine, the adapter from
// the hub gives the float64 reference's greedy tokens like the local folder does.
#include <gmock/gmock.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "engine/core/engine.h"
#include "engine/hub/adapter_dir.h"
#include "engine/loader/lora_adapter.h"
#include "engine/request/sampling_params.h"
#include "tests/integration/hub/hub_fixture.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/greedy_request.h"
#include "tests/support/reference_fixture.h"
#include "tests/support/scoped_env.h"

namespace cypris::test {
namespace {

using ::testing::HasSubstr;

const fs::path kBase = fs::path(CYPRIS_FIXTURES_DIR) / "models" / "llama_gqa_tied";
const fs::path kLora = fs::path(CYPRIS_FIXTURES_DIR) / "lora" / "llama_gqa_tied";

using Env = ScopedEnv;

class HubAdapterTest : public HubTest {
 protected:
  // org/sql-lora: v1.0 = mlp_o_r2_bin (adapter_model.bin only), main = qv_r4 (safetensors, with a
  // stale .bin beside it), both with files an adapter does not need.
  void make_adapter_repo() {
    FakeRepoSpec spec;
    spec.id = "org/sql-lora";
    const std::string junk = random_bytes(200 * 1024, 7);
    spec.commits.push_back({"v1",
                            {{"adapter_config.json", slurp(kLora / "mlp_o_r2_bin" / "adapter_config.json"), false},
                             {"adapter_model.bin", slurp(kLora / "mlp_o_r2_bin" / "adapter_model.bin"), true},
                             {"README.md", "# sql\n", false}}});
    spec.commits.push_back({"v2",
                            {{"adapter_config.json", slurp(kLora / "qv_r4" / "adapter_config.json"), false},
                             {"adapter_model.safetensors", slurp(kLora / "qv_r4" / "adapter_model.safetensors"), true},
                             {"adapter_model.bin", junk, true},
                             {"optimizer.pt", junk, true},
                             {"checkpoint-100/adapter_model.safetensors", junk, true},
                             {"README.md", "# sql\n", false}}});
    spec.branches = {{"main", 1}};
    spec.tags = {{"v1.0", 0}};
    commits_ = write_fake_repo(repos_.string(), spec);
    FakeRepoSpec model;
    model.id = "org/a-model";
    model.commits.push_back({"m", {{"config.json", "{}", false}, {"model.safetensors", junk, true}}});
    model.branches = {{"main", 0}};
    write_fake_repo(repos_.string(), model);
  }

  void point_env_at_fake_hub() {
    env_.emplace_back(std::make_unique<Env>("HF_ENDPOINT", hub_->endpoint()));
    env_.emplace_back(std::make_unique<Env>("HF_HUB_CACHE", cache_.string()));
    env_.emplace_back(std::make_unique<Env>("HF_TOKEN", ""));
    env_.emplace_back(std::make_unique<Env>("HF_HUB_OFFLINE", "0"));
  }

  size_t gets_of(const std::string& file) const {
    return hub_->count_requests([&](const FakeRequest& r) {
      return r.method == "GET" && r.server == "hub" && r.target.find("/resolve/") != std::string::npos &&
             r.target.ends_with("/" + file);
    });
  }

  std::vector<std::unique_ptr<Env>> env_;
};

// The adapters hold the same weights (each module's A and B, byte for byte).
void expect_same_adapter(const LoraAdapter& got, const LoraAdapter& want) {
  EXPECT_EQ(got.rank, want.rank);
  EXPECT_EQ(got.scale, want.scale);
  ASSERT_EQ(got.modules.size(), want.modules.size());
  for (const auto& [name, m] : want.modules) {
    ASSERT_TRUE(got.modules.count(name)) << name;
    const LoraModule& g = got.modules.at(name);
    EXPECT_EQ(g.a.shape, m.a.shape) << name;
    EXPECT_EQ(g.b.shape, m.b.shape) << name;
    EXPECT_EQ(0, std::memcmp(g.a.buffer.data(), m.a.buffer.data(), m.a.buffer.size())) << name;
    EXPECT_EQ(0, std::memcmp(g.b.buffer.data(), m.b.buffer.data(), m.b.buffer.size())) << name;
  }
}

TEST_F(HubAdapterTest, ARepoIdFetchesOnlyTheAdapterFilesAtItsRevision) {
  make_adapter_repo();
  point_env_at_fake_hub();

  const std::string main_dir = hub::resolve_adapter_dir("org/sql-lora");
  EXPECT_EQ(fs::path(main_dir), repo_dir("models--org--sql-lora") / "snapshots" / commits_[1]);
  expect_same_adapter(load_lora_adapter(main_dir, 16), load_lora_adapter(kLora / "qv_r4", 16));
  EXPECT_EQ(gets_of("adapter_config.json"), 1u);
  EXPECT_TRUE(fs::exists(fs::path(main_dir) / "adapter_model.safetensors"));
  for (const char* unneeded : {"adapter_model.bin", "optimizer.pt", "README.md", "checkpoint-100"}) {
    EXPECT_FALSE(fs::exists(fs::path(main_dir) / unneeded)) << unneeded;
  }
  // No body of a file the adapter does not need went over the wire (its LFS files go through the CDN).
  EXPECT_EQ(cdn_gets(), 1u);
  EXPECT_EQ(gets_of("README.md"), 0u);

  // A tag: the .bin-only adapter of the first commit.
  const std::string v1_dir = hub::resolve_adapter_dir("org/sql-lora@v1.0");
  EXPECT_EQ(fs::path(v1_dir), repo_dir("models--org--sql-lora") / "snapshots" / commits_[0]);
  expect_same_adapter(load_lora_adapter(v1_dir, 16), load_lora_adapter(kLora / "mlp_o_r2_bin", 16));

  // Offline: both come from the cache without a request; another revision is named as missing.
  {
    Env off("HF_HUB_OFFLINE", "1");
    hub_->clear_requests();
    EXPECT_EQ(hub::resolve_adapter_dir("org/sql-lora"), main_dir);
    EXPECT_EQ(hub::resolve_adapter_dir("org/sql-lora@v1.0"), v1_dir);
    EXPECT_TRUE(hub_->requests().empty());
    try {
      hub::resolve_adapter_dir("org/sql-lora@" + std::string(40, 'a'));
      FAIL() << "an unknown revision offline";
    } catch (const hub::HubError& e) {
      EXPECT_EQ(e.kind(), hub::HubErrorKind::NotCached);
      EXPECT_THAT(e.what(), HasSubstr("offline"));
    }
  }
}

TEST_F(HubAdapterTest, WhatIsNoAdapterIsRefusedByName) {
  make_adapter_repo();
  point_env_at_fake_hub();
  try {
    hub::resolve_adapter_dir("org/a-model");
    FAIL() << "a model repo is no adapter";
  } catch (const hub::HubError& e) {
    EXPECT_EQ(e.kind(), hub::HubErrorKind::EntryNotFound);
    EXPECT_THAT(e.what(), HasSubstr("adapter_config.json"));
    EXPECT_THAT(e.what(), HasSubstr("org/a-model"));
  }
  EXPECT_EQ(body_gets(), 0u);  // nothing of the model was fetched
  try {
    hub::resolve_adapter_dir("org/no-such-lora");
    FAIL();
  } catch (const hub::HubError& e) {
    EXPECT_EQ(e.kind(), hub::HubErrorKind::RepoNotFound) << e.what();
  }
  try {
    hub::resolve_adapter_dir("org/sql-lora@no-such-branch");
    FAIL();
  } catch (const hub::HubError& e) {
    EXPECT_EQ(e.kind(), hub::HubErrorKind::RevisionNotFound) << e.what();
  }
  for (const std::string bad : {"./missing-folder", "/nowhere/lora", "a/b/c", "org/sql-lora@", "org/../x"}) {
    try {
      hub::resolve_adapter_dir(bad);
      FAIL() << bad;
    } catch (const hub::HubError& e) {
      EXPECT_EQ(e.kind(), hub::HubErrorKind::BadInput) << bad << ": " << e.what();
    }
  }
  // A local folder is returned as is, whatever its name looks like.
  EXPECT_EQ(hub::resolve_adapter_dir((kLora / "qv_r4").string()), (kLora / "qv_r4").string());
}

TEST_F(HubAdapterTest, TheEngineServesAnAdapterFromTheHubLikeTheLocalFolder) {
  make_adapter_repo();
  point_env_at_fake_hub();
  EngineConfig cfg = testing_support::stories_config();
  cfg.model.model = kBase.string();
  cfg.model.skip_tokenizer_init = true;
  cfg.lora.enable_lora = true;
  cfg.server.lora_modules = {"sql=org/sql-lora", "old=org/sql-lora@v1.0"};
  Engine engine(cfg);
  std::vector<GenerateRequest> reqs;
  for (const auto& [name, fixture] : {std::pair<std::string, std::string>{"sql", "qv_r4"}, {"old", "mlp_o_r2_bin"}}) {
    const auto e = reference_fixture::load_expected_from((kLora / fixture).string());
    reqs.push_back(testing_support::reference_greedy_request(name, e.ids, name));
  }
  const auto got = testing_support::run_requests(engine, reqs);
  EXPECT_EQ(got.at("sql"), reference_fixture::load_expected_from((kLora / "qv_r4").string()).greedy);
  EXPECT_EQ(got.at("old"), reference_fixture::load_expected_from((kLora / "mlp_o_r2_bin").string()).greedy);
  // A run-time load of a repo that is no adapter is refused naming what is missing.
  try {
    engine.add_lora("model", engine.read_lora("org/a-model"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("adapter_config.json"));
  }
}

}  // namespace
}  // namespace cypris::test
