// The quantized-checkpoint fixtures (tests/fixtures/quant/*, written by tests/tools/gen_quant_fixtures.py)
// and the set-up the loader tests of those checkpoints share: the fixture's expected.json, opening it
// as a weight source, the reference's hash of dequantized values, the layers' shapes and the check
// that tensor-parallel slices are slices of the whole layer.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/common/dtype.h"
#include "engine/loader/model_config.h"
#include "engine/loader/weights.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "models/registry/registry.h"

namespace cypris::test {

inline const std::string kQuantFixtures = std::string(CYPRIS_FIXTURES_DIR) + "/quant/";

// The expected.json of a fixture folder (by path).
inline nlohmann::json quant_expected(const std::string& dir) {
  std::ifstream in(dir + "/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// The checkpoint in dir as the engine opens it with the load options o.
inline std::unique_ptr<WeightSource> open_checkpoint(const std::string& dir, const LoadOptions& o) {
  return open_weight_source(model_families(), dir, load_model_config(model_families(), dir), o);
}

// The same with only the quantization (-q) set, or none.
inline std::unique_ptr<WeightSource> open_checkpoint(const std::string& dir,
                                                     std::optional<std::string> quantization = std::nullopt) {
  LoadOptions o;
  o.quantization = std::move(quantization);
  return open_checkpoint(dir, o);
}

// FNV-1a 64 of n values' little-endian bytes, as the generator hashes its reference.
inline std::string fnv1a64(const float* v, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v);
  for (size_t i = 0; i < n * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

inline std::string fnv1a64(const std::vector<float>& v) {
  return fnv1a64(v.data(), v.size());
}

// The FNV-1a 64 of layer.weight read as fp32 [out, in] (shape): what the generators record per layer
// in expected.json's dequant_fnv1a64.
inline std::string dequantized_fnv1a64(const WeightSource& w, const std::string& layer,
                                       const std::vector<int64_t>& shape) {
  const HostTensor t = w.load(layer + ".weight", shape, DType::F32);
  return fnv1a64(t.buffer.as<float>(), static_cast<size_t>(t.view().numel()));
}

// [out, in] of a linear layer of the fixtures' Llama: hidden 128, 2 KV heads of 32, MLP of width mlp.
inline std::vector<int64_t> fixture_layer_shape(const std::string& layer, int64_t mlp) {
  if (layer.find("k_proj") != std::string::npos || layer.find("v_proj") != std::string::npos) return {64, 128};
  if (layer.find("gate_proj") != std::string::npos || layer.find("up_proj") != std::string::npos) return {mlp, 128};
  if (layer.find("down_proj") != std::string::npos) return {128, mlp};
  return {128, 128};
}

// The two ranks' row slices (column-parallel) and column halves (row-parallel) of the [rows, cols]
// layer `name` read as type are the bytes of the same rows / half rows of the whole layer. The
// column halves are skipped when one block of type is wider than half a row (it cannot be split).
inline void expect_slices_of_whole(const WeightSource& w, const std::string& name, const std::vector<int64_t>& full,
                                   DType type) {
  const int64_t rows = full[0], cols = full[1];
  const HostTensor whole = w.load(name, full, type);
  const size_t row_bytes = dtype_nbytes(type, cols), half = row_bytes / 2;
  for (int rank = 0; rank < 2; ++rank) {
    const HostTensor part = w.load(name, full, type, ShardSpec::split(0, rank, 2));
    EXPECT_EQ(
        std::memcmp(part.buffer.data(), static_cast<const char*>(whole.buffer.data()) + rank * (rows / 2) * row_bytes,
                    (rows / 2) * row_bytes),
        0)
        << "rank " << rank << " rows";
    if (dtype_block(type).elems > cols / 2) continue;
    const HostTensor halves = w.load(name, full, type, ShardSpec::split(1, rank, 2));
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(std::memcmp(static_cast<const char*>(halves.buffer.data()) + r * half,
                            static_cast<const char*>(whole.buffer.data()) + r * row_bytes + rank * half, half),
                0)
          << "rank " << rank << " row " << r;
    }
  }
}

// A layer kept over reordered input columns (WeightSource::column_segments) read back as fp32
// [local rows, local cols] in the model's column order: each segment's blocks decoded by the
// kernels' reference and put back at the columns they multiply. Empty when the shard has no
// segments; a column covered twice or never fails the test.
inline std::vector<float> segments_dequantized(const WeightSource& w, const std::string& name,
                                               const std::vector<int64_t>& full, const ShardSpec& shard = {}) {
  const std::vector<ColumnSegment> segs = w.column_segments(name, full, shard);
  if (segs.empty()) return {};
  const std::vector<int64_t> local = shard_shape(name, full, shard);
  const int64_t rows = local[0], cols = local[1];
  std::vector<float> out(static_cast<size_t>(rows * cols), 0.0f);
  std::vector<int> seen(static_cast<size_t>(cols), 0);
  for (size_t i = 0; i < segs.size(); ++i) {
    const auto k = static_cast<int64_t>(segs[i].columns.size());
    Buffer b(dtype_nbytes(segs[i].dtype, rows * k));
    w.read_segment(name, full, shard, i, b.data());
    std::vector<float> deq(static_cast<size_t>(rows * k));
    quant::dequantize_row(segs[i].dtype, b.data(), deq.data(), rows * k);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t c = segs[i].columns[static_cast<size_t>(j)];
      EXPECT_TRUE(c >= 0 && c < cols) << name << ": column " << c;
      if (c < 0 || c >= cols) return {};
      ++seen[static_cast<size_t>(c)];
      for (int64_t r = 0; r < rows; ++r) out[static_cast<size_t>(r * cols + c)] = deq[static_cast<size_t>(r * k + j)];
    }
  }
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(seen[static_cast<size_t>(c)], 1) << name << ": column " << c;
  return out;
}

}  // namespace cypris::test
