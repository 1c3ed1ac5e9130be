// Malformed or unsupported tokenizer files give a cypris::Error that names the file and the part.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/common/error.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;

class TokenizerErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cypris_tok_err_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream out(dir_ / name, std::ios::binary);
    out << text;
  }
  // The message of the Error load_tokenizer throws ("" when it does not throw).
  std::string load_error(const std::string& mode = "auto") {
    try {
      TokenizerOptions o;
      o.mode = mode;
      load_tokenizer(dir_, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  static std::string minimal_json(const std::string& pre_tokenizer, const std::string& decoder = "null") {
    return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
               "added_tokens": [], "normalizer": null, "pre_tokenizer": )" +
           pre_tokenizer + R"(, "post_processor": null, "decoder": )" + decoder + "}";
  }
  fs::path dir_;
};

TEST_F(TokenizerErrorsTest, MinimalFileLoads) {
  write("tokenizer.json", minimal_json("null"));
  auto tok = load_tokenizer(dir_);
  EXPECT_EQ(tok->encode("abab", false), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{2, 0}), "ab a");  // no decoder: tokens joined by spaces
}

TEST_F(TokenizerErrorsTest, TruncatedJsonNamesTheFile) {
  std::string full = minimal_json("null");
  write("tokenizer.json", full.substr(0, full.size() / 2));
  std::string msg = load_error();
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
}

TEST_F(TokenizerErrorsTest, UnknownPreTokenizerNamesTheComponentAndTheChoices) {
  write("tokenizer.json", minimal_json(R"({"type": "Foo"})"));
  std::string msg = load_error();
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pre_tokenizer type 'Foo' is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ByteLevel"), std::string::npos) << msg;
}

TEST_F(TokenizerErrorsTest, UnknownDecoderAndModel) {
  write("tokenizer.json", minimal_json("null", R"({"type": "WordPiece", "prefix": "##"})"));
  EXPECT_NE(load_error().find("decoder type 'WordPiece' is not supported"), std::string::npos);
  write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  EXPECT_NE(load_error().find("model type 'Unigram' is not supported; supported: BPE"), std::string::npos);
}

TEST_F(TokenizerErrorsTest, MergeWithUnknownTokenAndBadRegex) {
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]}})");
  std::string msg = load_error();
  EXPECT_NE(msg.find("merge 0 'a c'"), std::string::npos) << msg;
  write("tokenizer.json",
        minimal_json(R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})"));
  msg = load_error();
  EXPECT_NE(msg.find("does not compile"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
}

TEST_F(TokenizerErrorsTest, BadTokenizerConfigNamesTheFile) {
  write("tokenizer.json", minimal_json("null"));
  write("tokenizer_config.json", R"({"bos_token": 5})");
  std::string msg = load_error();
  EXPECT_NE(msg.find("tokenizer_config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bos_token"), std::string::npos) << msg;
  write("tokenizer_config.json", R"({"chat_template": [{"name": "x"}]})");
  EXPECT_NE(load_error().find("chat_template"), std::string::npos);
  write("tokenizer_config.json", R"({"add_bos_token": true,)");
  EXPECT_NE(load_error().find("tokenizer_config.json: invalid JSON"), std::string::npos);
}

TEST_F(TokenizerErrorsTest, ChatTemplateListAndAddedTokenObjects) {
  write("tokenizer.json", minimal_json("null"));
  write("tokenizer_config.json", R"({"bos_token": {"content": "ab", "lstrip": false}, "eos_token": "b",
      "chat_template": [{"name": "default", "template": "T1"}, {"name": "tool_use", "template": "T2"}],
      "model_max_length": 4096})");
  auto tok = load_tokenizer(dir_);
  EXPECT_EQ(tok->bos_id(), 2);
  EXPECT_EQ(tok->eos_id(), 1);
  ASSERT_EQ(tok->chat_templates().size(), 2u);
  EXPECT_EQ(tok->chat_templates()[1].name, "tool_use");
  EXPECT_EQ(tok->chat_templates()[1].source, "T2");
  EXPECT_EQ(tok->model_max_length(), 4096);
}

TEST_F(TokenizerErrorsTest, TemplateFileAndSpecialTokensMapFallbacks) {
  write("tokenizer.json", minimal_json("null"));
  write("tokenizer_config.json", R"({"model_max_length": 8})");
  write("chat_template.jinja", "{{ messages }}");
  write("special_tokens_map.json", R"({"bos_token": {"content": "a"}, "eos_token": "ab"})");
  auto tok = load_tokenizer(dir_);
  ASSERT_EQ(tok->chat_templates().size(), 1u);
  EXPECT_EQ(tok->chat_templates()[0].source, "{{ messages }}");
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->is_special(2));
  write("special_tokens_map.json", "{");
  EXPECT_NE(load_error().find("special_tokens_map.json: invalid JSON"), std::string::npos);
}

TEST_F(TokenizerErrorsTest, UnsupportedJsonFallsBackToSentencePiece) {
  write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  fs::copy_file(fs::path(CYPRIS_TESTDATA_DIR) / "tokenizers" / "llama2-spm" / "tokenizer.model",
                dir_ / "tokenizer.model");
  auto tok = load_tokenizer(dir_);
  EXPECT_EQ(tok->encode("Hello world", false), (std::vector<int32_t>{15043, 3186}));
}

TEST_F(TokenizerErrorsTest, MissingFilesAndBadSentencePiece) {
  std::string msg = load_error();
  EXPECT_NE(msg.find("no tokenizer found"), std::string::npos) << msg;
  write("tokenizer.model", "this is not a protobuf");
  msg = load_error();
  EXPECT_NE(msg.find("tokenizer.model"), std::string::npos) << msg;
  EXPECT_NE(load_error("fastest").find("mode 'fastest' is not supported"), std::string::npos);
  fs::remove_all(dir_ / "tokenizer.model");
  write("vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  write("merges.txt", "#version: 0.2\na b\nnot-a-pair\n");
  msg = load_error();
  EXPECT_NE(msg.find("merges.txt"), std::string::npos) << msg;
}

}  // namespace
}  // namespace cypris
