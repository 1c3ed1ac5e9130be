// End-to-end: the real trained stories260k checkpoint must greedily generate exactly the text
// published with llama2.c (testdata/models/stories260k/expected_greedy_200_from_bos.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/runtime/model_runner.h"

namespace cypris {
namespace {

const std::string kDir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A minimal decoder for this tokenizer.json (Replace ▁ -> ' ', ByteFallback, Fuse, Strip one
// leading space), written here so the test does not depend on the tokenizer module.
std::string decode(const std::vector<int32_t>& ids) {
  const auto tok = nlohmann::json::parse(read_file(kDir + "/tokenizer.json"));
  std::vector<std::string> pieces(tok["model"]["vocab"].size());
  for (const auto& [piece, id] : tok["model"]["vocab"].items()) pieces.at(id.get<size_t>()) = piece;
  std::string out;
  for (int32_t id : ids) {
    if (id <= 2) continue;  // <unk>, <s>, </s> are special: skipped
    const std::string& p = pieces.at(id);
    if (p.size() == 6 && p.rfind("<0x", 0) == 0 && p.back() == '>') {
      out.push_back(static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
      continue;
    }
    std::string s = p;
    for (size_t pos; (pos = s.find("\xE2\x96\x81")) != std::string::npos;) s.replace(pos, 3, " ");
    out += s;
  }
  if (!out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

std::vector<int32_t> greedy(ModelRunner& runner, int steps) {
  std::vector<int32_t> ids = {1};  // BOS
  Logits l = runner.execute(make_single_sequence_batch(ids, 0, runner.block_size()));
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) {
    const int32_t next = argmax(l.row(0), l.vocab);
    out.push_back(next);
    ids.push_back(next);
    if (i + 1 < steps) {
      const int32_t tok[] = {next};
      l = runner.execute(make_single_sequence_batch(tok, static_cast<int32_t>(ids.size()) - 1, runner.block_size()));
    }
  }
  return out;
}

TEST(Stories260k, GreedyFromBosMatchesPublishedTextFp32) {
  ModelRunnerOptions opt;
  opt.model_dir = kDir;
  opt.load.dtype = "float32";
  opt.threads = 2;
  ModelRunner runner(opt);
  EXPECT_EQ(runner.weight_dtype(), DType::F32);
  const std::string expected = read_file(kDir + "/expected_greedy_200_from_bos.txt");
  EXPECT_EQ(decode(greedy(runner, 200)), expected);
}

TEST(Stories260k, AutoDtypeStoresFp16WeightsAndStillMatches) {
  ModelRunnerOptions opt;
  opt.model_dir = kDir;
  opt.threads = 2;
  opt.block_size = 4;  // many blocks: exercises the block table
  ModelRunner runner(opt);
  EXPECT_EQ(runner.weight_dtype(), DType::F16);  // "auto" gives FP16 for an FP32 checkpoint
  const std::string expected = read_file(kDir + "/expected_greedy_200_from_bos.txt");
  EXPECT_EQ(decode(greedy(runner, 200)), expected);
}

}  // namespace
}  // namespace cypris
