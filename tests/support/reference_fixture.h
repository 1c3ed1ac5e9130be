// The torch-reference model fixtures (tests/fixtures/models/*/expected.json, written by
// tests/tools/gen_llama_fixtures.py and gen_family_fixtures.py) and the set-up the model tests
// share (reference, tensor-parallel and GGUF logits): runner options for a fixture, one full
// prefill with logits for every position, the row error, the argmax, a greedy continuation.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runtime/model_runner.h"

namespace cypris::reference_fixture {

inline const std::string kFixtures = std::string(CYPRIS_FIXTURES_DIR) + "/models/";

struct Expected {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;  // [T][vocab]
  std::vector<int32_t> greedy;             // the reference's greedy continuation (family fixtures only)
};

// The expected.json of a fixture folder (by path).
inline Expected load_expected_from(const std::string& dir) {
  std::ifstream in(dir + "/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str());
  Expected e;
  e.ids = j["input_ids"].get<std::vector<int32_t>>();
  e.logits = j["logits"].get<std::vector<std::vector<float>>>();
  if (j.contains("greedy")) e.greedy = j["greedy"].get<std::vector<int32_t>>();
  return e;
}

// The expected.json of a model fixture under tests/fixtures/models.
inline Expected load_expected(const std::string& name) { return load_expected_from(kFixtures + name); }

// max |a - b| / max |b| over a row of n values.
inline double rel_err(const float* a, const float* b, int64_t n) {
  double diff = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::abs(static_cast<double>(b[i])));
  }
  return diff / mag;
}

inline double rel_err(const float* a, const std::vector<float>& b) {
  return rel_err(a, b.data(), static_cast<int64_t>(b.size()));
}

inline int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// A runner on the CPU for the model at path (a fixture folder, a .gguf file): 2 threads in all,
// weights in dtype, num_blocks KV blocks of block_size tokens (0: the runner's default), tp ranks.
// llama_dynamic runs past its max_position_embeddings (12), where its dynamic NTK scaling acts.
inline ModelRunnerOptions fixture_options(const std::string& path, const std::string& dtype = "float32",
                                          int block_size = 16, int64_t num_blocks = 0, int tp = 1) {
  ModelRunnerOptions o;
  o.model_dir = path;
  o.load.dtype = dtype;
  o.threads = 2;
  o.block_size = block_size;
  o.num_blocks = num_blocks;
  o.parallel.world_size = tp;
  if (path.ends_with("llama_dynamic")) o.load.overrides.max_model_len = 24;
  return o;
}

// One prefill of ids with the logits of every position.
inline Logits full_prefill(ModelRunner& runner, const std::vector<int32_t>& ids) {
  BatchContext b = make_single_sequence_batch(ids, 0, runner.block_size());
  b.logits_indices.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(ids.size()); ++i) b.logits_indices.push_back(i);
  return runner.execute(b);
}

// got and ref (two runs of the same model, split or not) agree row by row: relative error under
// 1e-5 and the same argmax.
inline void expect_same_logits(const Logits& got, const Logits& ref, const std::string& what) {
  ASSERT_EQ(got.rows, ref.rows) << what;
  ASSERT_EQ(got.vocab, ref.vocab) << what;
  for (int64_t r = 0; r < ref.rows; ++r) {
    EXPECT_LT(rel_err(got.row(r), ref.row(r), ref.vocab), 1e-5) << what << " row " << r;
    EXPECT_EQ(argmax(got.row(r), got.vocab), argmax(ref.row(r), ref.vocab)) << what << " row " << r;
  }
}

// Greedy decoding after a prefill of ids: n tokens, each decoded alone through the paged cache.
// With logits, the logits each token was chosen from are appended there.
inline std::vector<int32_t> greedy_decode(ModelRunner& runner, std::vector<int32_t> ids, size_t n,
                                          std::vector<Logits>* logits = nullptr) {
  Logits l = runner.execute(make_single_sequence_batch(ids, 0, runner.block_size()));
  std::vector<int32_t> got;
  for (size_t step = 0; step < n; ++step) {
    if (logits) logits->push_back(l);
    const int32_t next = argmax(l.row(0), l.vocab);
    got.push_back(next);
    ids.push_back(next);
    const int32_t one[] = {next};
    l = runner.execute(make_single_sequence_batch(one, static_cast<int32_t>(ids.size()) - 1, runner.block_size()));
  }
  return got;
}

}  // namespace cypris::reference_fixture
