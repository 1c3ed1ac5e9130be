// Shared helpers of the tokenizer tests: the test-data tokenizers (loaded once) and their cases.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace cypris::testing {

inline std::filesystem::path tokenizer_dir(const std::string& name) {
  return std::filesystem::path(CYPRIS_TESTDATA_DIR) / "tokenizers" / name;
}

// name: a folder under testdata/tokenizers, or a full path. mode: TokenizerOptions::mode.
inline const Tokenizer& cached_tokenizer(const std::string& name, const std::string& mode = "auto") {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[name + "|" + mode];
  if (!slot) {
    std::filesystem::path dir = name.find('/') != std::string::npos ? std::filesystem::path(name) : tokenizer_dir(name);
    TokenizerOptions opts;
    opts.mode = mode;
    slot = load_tokenizer(dir, opts);
  }
  return *slot;
}

struct TokCase {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::vector<TokCase> load_cases(const std::string& name) {
  std::ifstream in(tokenizer_dir(name) / "cases.jsonl");
  std::vector<TokCase> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    out.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>()});
  }
  return out;
}

}  // namespace cypris::testing
