// File selection (globs, defaults, the *.bin rule), cache naming, ETag normalisation and settings
// from the environment -- the hub pieces that need no server.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "engine/hub/cache.h"
#include "engine/hub/client_impl.h"
#include "engine/hub/hash.h"
#include "engine/hub/hub.h"
#include "tests/support/scoped_env.h"

namespace cypris::hub {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> paths(const std::vector<RepoFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.path);
  return out;
}

std::vector<RepoFile> repo(std::initializer_list<const char*> names) {
  std::vector<RepoFile> out;
  for (const char* n : names) out.push_back(RepoFile{n, 1, "0000", ""});
  return out;
}

TEST(HubSelect, DefaultsTakeWeightsConfigsTokenizerAndDropPicklesNextToSafetensors) {
  auto files =
      repo({".gitattributes", "README.md", "config.json", "generation_config.json", "tokenizer.json", "tokenizer.model",
            "merges.txt", "model-00001-of-00002.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
            "original/consolidated.00.pth", "model.gguf", "onnx/model.onnx"});
  EXPECT_EQ(
      paths(select_files(files, {}, {})),
      (std::vector<std::string>{"config.json", "generation_config.json", "tokenizer.json", "tokenizer.model",
                                "merges.txt", "model-00001-of-00002.safetensors", "model.safetensors.index.json"}));
  auto bin_only = repo({"config.json", "pytorch_model.bin", "training_args.bin"});
  EXPECT_EQ(paths(select_files(bin_only, {}, {})),
            (std::vector<std::string>{"config.json", "pytorch_model.bin", "training_args.bin"}));
}

TEST(HubSelect, GlobsFollowPythonFnmatch) {
  auto files = repo({"a.json", "sub/b.json", "sub/deep/c.json", "q4/model-Q4_K_M.gguf", "model-Q8_0.gguf"});
  // '*' crosses folders, like Python's fnmatch used by huggingface_hub.
  EXPECT_EQ(paths(select_files(files, {"*.json"}, {})),
            (std::vector<std::string>{"a.json", "sub/b.json", "sub/deep/c.json"}));
  EXPECT_EQ(paths(select_files(files, {"*.json"}, {"sub/"})), (std::vector<std::string>{"a.json"}));
  EXPECT_EQ(paths(select_files(files, {"*Q4_K_M*"}, {})), (std::vector<std::string>{"q4/model-Q4_K_M.gguf"}));
  EXPECT_EQ(paths(select_files(files, {"sub/*"}, {"*/deep/*"})), (std::vector<std::string>{"sub/b.json"}));
  EXPECT_EQ(paths(select_files(files, {"model-Q[48]_0.gguf"}, {})), (std::vector<std::string>{"model-Q8_0.gguf"}));
  // `cypris download --include "*Q4_K_M*"` on a GGUF repo: every part of that quantization, nothing else.
  auto gguf = repo({"README.md", "m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf", "m-Q4_K_S.gguf",
                    "m-Q8_0.gguf", "m-IQ4_XS.gguf"});
  EXPECT_EQ(paths(select_files(gguf, {"*Q4_K_M*"}, {})),
            (std::vector<std::string>{"m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf"}));
}

TEST(HubCache, NamesAndValidation) {
  EXPECT_EQ(repo_folder_name("org/name"), "models--org--name");
  EXPECT_EQ(repo_folder_name("gpt2"), "models--gpt2");
  EXPECT_NO_THROW(validate_repo_id("meta-llama/Llama-3.2-1B-Instruct"));
  for (const char* bad : {"", "/x", "a/b/c", "a/../b", "..", "a b/c", "org/", "-x/y"}) {
    EXPECT_THROW(validate_repo_id(bad), HubError) << bad;
  }
  EXPECT_NO_THROW(validate_revision("refs/pr/1"));
  EXPECT_THROW(validate_revision("../x"), HubError);
  EXPECT_THROW(validate_revision(""), HubError);
  EXPECT_TRUE(is_safe_repo_path("a..b/c.json"));
  for (const char* bad : {"", "/etc/passwd", "a/../../b", "..", "a//b", "a/./b", "a\\b", "a/"}) {
    EXPECT_FALSE(is_safe_repo_path(bad)) << bad;
  }
  EXPECT_TRUE(is_commit_hash("e7da7f221d5bf496a48136c0cd264e630fe9fcc8"));
  EXPECT_FALSE(is_commit_hash("E7DA7F221D5BF496A48136C0CD264E630FE9FCC8"));
  EXPECT_FALSE(is_commit_hash("main"));
}

TEST(HubCache, EtagNormalisationMatchesPython) {
  EXPECT_EQ(detail::normalize_etag("\"abc\""), "abc");
  EXPECT_EQ(detail::normalize_etag("W/\"abc\""), "abc");
  // lstrip("W/") strips characters, not a prefix.
  EXPECT_EQ(detail::normalize_etag("WW//\"abc\""), "abc");
}

TEST(HubHash, GitBlobAndSha256KnownValues) {
  // `printf 'hello\n' | git hash-object --stdin` and `printf 'hello\n' | sha256sum`.
  EXPECT_EQ(git_blob_sha1_hex("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
  EXPECT_EQ(sha256_hex("hello\n"), "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
  EXPECT_EQ(git_blob_sha1_hex(""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
}

using EnvVar = test::ScopedEnv;

TEST(HubSettings, EnvironmentOrder) {
  std::string home = (fs::temp_directory_path() / ("cypris-hf-home-" + std::to_string(::getpid()))).string();
  fs::create_directories(home);
  std::ofstream(home + "/token") << "  hf_from_file\r\n";
  EnvVar a("HF_HOME", home.c_str()), b("HF_TOKEN", nullptr), c("HUGGING_FACE_HUB_TOKEN", nullptr),
      d("HF_TOKEN_PATH", nullptr), e("HF_HUB_CACHE", nullptr), f("HUGGINGFACE_HUB_CACHE", nullptr),
      g("HF_ENDPOINT", "http://127.0.0.1:9/"), h("HF_HUB_OFFLINE", "yes"), i("TRANSFORMERS_OFFLINE", nullptr),
      j("HF_HUB_DISABLE_IMPLICIT_TOKEN", nullptr);
  auto s = settings_from_env();
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:9");
  EXPECT_EQ(s.cache_dir, home + "/hub");
  EXPECT_EQ(s.token, "hf_from_file");
  EXPECT_TRUE(s.offline);
  {
    EnvVar t("HF_TOKEN", "hf_env"), cache("HF_HUB_CACHE", "/tmp/elsewhere"), off("HF_HUB_OFFLINE", "0");
    auto s2 = settings_from_env();
    EXPECT_EQ(s2.token, "hf_env");
    EXPECT_EQ(s2.cache_dir, "/tmp/elsewhere");
    EXPECT_FALSE(s2.offline);
    EXPECT_EQ(settings_from_env("hf_flag").token, "hf_flag");
  }
  {
    EnvVar no_implicit("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1");
    EXPECT_EQ(settings_from_env().token, "");
  }
  fs::remove_all(home);
}

}  // namespace
}  // namespace cypris::hub
