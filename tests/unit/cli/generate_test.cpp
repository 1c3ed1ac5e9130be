// `cypris generate` and `cypris bench latency` as a user runs them (exit codes, output).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/bench.h"
#include "app/cli/commands.h"

namespace cypris::cli {
namespace {

const std::string kStories = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Piece text of the ids (▁ as space, no byte tokens expected at the start of the story).
std::string pieces_text(const std::string& csv) {
  const auto tok = nlohmann::json::parse(read_file(kStories + "/tokenizer.json"));
  std::vector<std::string> pieces(tok["model"]["vocab"].size());
  for (const auto& [piece, id] : tok["model"]["vocab"].items()) pieces.at(id.get<size_t>()) = piece;
  std::string out;
  std::stringstream ss(csv);
  std::string part;
  while (std::getline(ss, part, ',')) {
    std::string p = pieces.at(std::stoi(part));
    for (size_t pos; (pos = p.find("\xE2\x96\x81")) != std::string::npos;) p.replace(pos, 3, " ");
    out += p;
  }
  return out.substr(out[0] == ' ' ? 1 : 0);
}

TEST(Generate, GreedyTextFromBosIsThePublishedStory) {
  testing::internal::CaptureStdout();
  const int rc = run_generate({"--model", kStories, "--prompt-ids", "1", "--max-tokens", "200", "--temperature", "0",
                               "--ignore-eos", "--dtype=float32", "--threads", "2"});
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0);
  std::string expected = read_file(kStories + "/expected_greedy_200_from_bos.txt");
  while (!expected.empty() && expected.back() == '\n') expected.pop_back();
  EXPECT_EQ(out, expected + "\n");
}

// A GGUF file as --model (-q gguf, the quantized Q8_0 weights kept as they are, the tokenizer from
// the file): greedy text equal to llama.cpp's greedy ids for the same file (testdata/gguf/refs),
// spelled with the HF tokenizer's pieces. Also through --gguf-file with the folder as --model.
TEST(Generate, GgufQ8_0GreedyTextEqualsLlamaCpps) {
  const std::string dir = std::string(CYPRIS_TESTDATA_DIR) + "/gguf";
  const auto ref = nlohmann::json::parse(read_file(dir + "/refs/stories260k-Q8_0.json"));
  std::string csv;
  for (const auto& id : ref["greedy"]) csv += (csv.empty() ? "" : ",") + std::to_string(id.get<int>());
  std::string expected = pieces_text(csv);
  for (size_t pos; (pos = expected.find("<0x0A>")) != std::string::npos;) expected.replace(pos, 6, "\n");
  const std::vector<std::vector<std::string>> model_args = {{"--model", dir + "/stories260k-Q8_0.gguf", "-q", "gguf"},
                                                            {"--model", dir, "--gguf-file", "stories260k-Q8_0.gguf"}};
  for (const auto& m : model_args) {
    std::vector<std::string> args = m;
    for (const char* a : {"--prompt-ids", "1", "--max-tokens", "64", "--temperature", "0", "--ignore-eos", "--threads",
                          "2", "--dtype=float32"})
      args.push_back(a);
    testing::internal::CaptureStdout();
    const int rc = run_generate(args);
    const std::string out = testing::internal::GetCapturedStdout();
    ASSERT_EQ(rc, 0) << m[1];
    EXPECT_EQ(out, expected + "\n") << m[1];
  }
}

TEST(Generate, IdsWithoutTokenizerSpellTheStory) {
  testing::internal::CaptureStdout();
  const int rc = run_generate({"--model", kStories, "--prompt-ids", "1", "--max-tokens", "20", "--temperature", "0",
                               "--skip-tokenizer-init", "--dtype=float32", "--threads", "2"});
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0);
  const std::string text = pieces_text(out.substr(0, out.find('\n')));
  const std::string expected = read_file(kStories + "/expected_greedy_200_from_bos.txt");
  EXPECT_EQ(expected.compare(0, text.size(), text), 0) << text;
  EXPECT_GT(text.size(), 40u);
}

TEST(Generate, TextPromptThroughTheTokenizer) {
  testing::internal::CaptureStdout();
  const int rc = run_generate({"--model", kStories, "--prompt", "Once upon a time", "--max-tokens", "8",
                               "--temperature", "0", "--threads", "2"});
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0);
  // The story's greedy continuation after its own first words.
  EXPECT_EQ(out.rfind(", there was a little girl", 0), 0u) << out;
}

TEST(Generate, BeamSearchAndBannedStrings) {
  testing::internal::CaptureStdout();
  int rc = run_generate({"--model", kStories, "--prompt-ids", "1", "--max-tokens", "40", "--temperature", "0",
                         "--ignore-eos", "--threads", "2", "--banned-strings", "Lily", "little"});
  std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0);
  EXPECT_GT(out.size(), 60u);
  EXPECT_EQ(out.find("Lily"), std::string::npos) << out;
  EXPECT_EQ(out.find("little"), std::string::npos) << out;

  testing::internal::CaptureStdout();
  rc = run_generate({"--model", kStories, "--prompt-ids", "1", "--max-tokens", "12", "--beam-width", "3",
                     "--ignore-eos", "--threads", "2"});
  out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0);
  EXPECT_GT(out.size(), 20u);  // one hypothesis, printed when the search ends
  EXPECT_EQ(run_generate({"--model", kStories, "--prompt-ids", "1", "--beam-width", "-1"}), 2);
}

TEST(Generate, SeededSamplingIsReproducibleAndBadInputIsAnError) {
  const Args args = {"--model", kStories,        "--prompt-ids", "1,403",  "--max-tokens",
                     "12",      "--temperature", "1.0",          "--seed", "5"};
  testing::internal::CaptureStdout();
  ASSERT_EQ(run_generate(args), 0);
  const std::string a = testing::internal::GetCapturedStdout();
  testing::internal::CaptureStdout();
  ASSERT_EQ(run_generate(args), 0);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), a);

  testing::internal::CaptureStderr();
  EXPECT_EQ(run_generate({"--model", kStories, "--prompt-ids", "1,512"}), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("out of range"), std::string::npos);
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_generate({"--model", kStories, "--prompt-ids", "1", "--max-tokens", "x"}), 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("--max-tokens"), std::string::npos);
  // Past the model's 512 positions --max-model-len is no error: RoPE is scaled (dynamic NTK), and said so.
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_generate({"--model", kStories, "--prompt-ids", "1", "--max-tokens", "2", "--max-model-len", "4096"}), 0);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("dynamic NTK with factor 8"), std::string::npos);
}

TEST(BenchLatency, RunsOnDummyWeightsFromAConfigOnlyFolder) {
  const std::string cfg = std::string(CYPRIS_FIXTURES_DIR) + "/configs/llama-110m";
  testing::internal::CaptureStdout();
  // A shrunken context keeps the test fast; the model is still the 110M config.
  const int rc = run_bench({"latency", "--model", cfg, "--load-format", "dummy", "--input-len", "4", "--output-len",
                            "2", "--num-iters", "1", "--num-iters-warmup", "0", "--max-model-len", "64"});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("decode tokens/s"), std::string::npos) << out;
  EXPECT_NE(out.find("prefill tokens/s"), std::string::npos) << out;
  EXPECT_NE(out.find("109.5M"), std::string::npos) << out;
}

TEST(BenchLatency, SpeculativeDecodingReportsTheMeanAcceptedLength) {
  testing::internal::CaptureStdout();
  const int rc = run_bench({"latency", "--model", kStories, "--input-len", "128", "--output-len", "128", "--num-iters",
                            "1", "--num-iters-warmup", "0", "--prompt-repeat", "32", "--threads", "2",
                            "--disable-log-stats", "--speculative-model", "[ngram]", "--num-speculative-tokens", "4",
                            "--ngram-prompt-lookup-max", "3"});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("| speculative decoding | prompt lookup, 4 tokens, 1..3-grams |"), std::string::npos) << out;
  const std::string key = "| mean accepted length (tokens per verification step) | ";
  const size_t at = out.find(key);
  ASSERT_NE(at, std::string::npos) << out;
  const double mean_len = std::stod(out.substr(at + key.size()));
  EXPECT_GT(mean_len, 1.0) << "no draft accepted on a repeating prompt: " << out;
  EXPECT_LE(mean_len, 5.0) << out;
}

TEST(BenchLatency, ADraftModelAndSampledDecodingAreReported) {
  // stories260k drafting for itself, sampled at temperature 1 (seeded): the table names the draft
  // and the sampling, and the drafts are accepted (the draft's q is the target's p).
  testing::internal::CaptureStdout();
  const int rc = run_bench({"latency", "--model", kStories, "--input-len", "16", "--output-len", "32", "--num-iters",
                            "1", "--num-iters-warmup", "0", "--threads", "2", "--disable-log-stats",
                            "--temperature", "1.0", "--speculative-model", kStories, "--num-speculative-tokens", "3"});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("| speculative decoding | draft model " + std::string(kStories) + ", up to 3 tokens (adaptive) |"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("| sampling | temperature 1.00, seeded |"), std::string::npos) << out;
  const std::string key = "| mean accepted length (tokens per verification step) | ";
  const size_t at = out.find(key);
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(std::stod(out.substr(at + key.size())), 2.0) << out;
}

TEST(BenchThroughput, ReportsTokensPerSecondForAllRequests) {
  testing::internal::CaptureStdout();
  const int rc = run_bench({"throughput", "--model", kStories, "--num-prompts", "8", "--input-len", "16",
                            "--output-len", "8", "--threads", "2", "--disable-log-stats"});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("| requests | 8 (random prompts) |"), std::string::npos) << out;
  EXPECT_NE(out.find("output tokens/s"), std::string::npos) << out;
}

TEST(Bench, DispatchAndBadInput) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_bench({"nonsense"}), 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("latency, throughput or serving"), std::string::npos);
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_bench({"latency", "--model", kStories, "--batch-size", "2"}), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("--batch-size 2"), std::string::npos);
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_bench({"latency", "--model", kStories, "--load-format", "npcache"}), 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("not supported yet"), std::string::npos);
}

}  // namespace
}  // namespace cypris::cli
