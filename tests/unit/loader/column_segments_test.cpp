// Layers kept quantized over reordered input columns (WeightSource::column_segments): act-order GPTQ
// (tests/fixtures/quant/gptq_w4_g64_act_order) with its columns sorted by group, and EXL2
// (tests/fixtures/quant/exl2_mixed) at its bits, cut into W4 segments (2-4-bit groups) and W8 ones
// (5-8 bits). The blocks, decoded and put back at the columns they multiply, equal the float64
// reference bit for bit; tensor-parallel shards are slices of the whole; and the cutting rule
// itself (engine/loader/column_segments.h).
#include "engine/loader/column_segments.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "engine/loader/safetensors.h"
#include "tests/support/quant_checkpoints.h"

namespace cypris {
namespace {

using test::fnv1a64;
using test::open_checkpoint;
using test::quant_expected;
using test::segments_dequantized;

const std::string kActOrder = test::kQuantFixtures + "gptq_w4_g64_act_order";
const std::string kExl2 = test::kQuantFixtures + "exl2_mixed";

std::vector<int64_t> layer_shape(const std::string& layer) {
  return test::fixture_layer_shape(layer, 128);
}

// The linear layers of a fixture (its reference hashes), lm_head left out (read as vocabulary rows).
std::vector<std::pair<std::string, std::string>> linear_layers(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  const nlohmann::json hashes = quant_expected(dir)["dequant_fnv1a64"];
  for (const auto& [layer, hash] : hashes.items()) {
    if (layer != "lm_head") out.emplace_back(layer, hash.get<std::string>());
  }
  return out;
}

TEST(ColumnSegments, ActOrderGptqIsOneSegmentOfW4BlocksOverColumnsSortedByGroup) {
  const auto w = open_checkpoint(kActOrder);
  const auto layers = linear_layers(kActOrder);
  ASSERT_EQ(layers.size(), 7u);
  for (const auto& [layer, hash] : layers) {
    SCOPED_TRACE(layer);
    const std::vector<ColumnSegment> segs = w->column_segments(layer + ".weight", layer_shape(layer), {});
    ASSERT_EQ(segs.size(), 1u);
    EXPECT_EQ(segs[0].dtype, DType::W4G32);  // groups of 64: 32-value blocks, as without act-order
    // Really reordered (the fixture's g_idx is a random permutation), and every column once.
    std::vector<int32_t> identity(segs[0].columns.size());
    for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int32_t>(i);
    EXPECT_NE(segs[0].columns, identity);
    EXPECT_EQ(fnv1a64(segments_dequantized(*w, layer + ".weight", layer_shape(layer))), hash);
  }
}

TEST(ColumnSegments, Exl2LayersKeepTheirBitsInW4AndW8Segments) {
  const auto w = open_checkpoint(kExl2);
  const nlohmann::json groups = quant_expected(kExl2)["groups"];
  const auto layers = linear_layers(kExl2);
  ASSERT_EQ(layers.size(), 14u);
  for (const auto& [layer, hash] : layers) {
    SCOPED_TRACE(layer);
    const std::vector<ColumnSegment> segs = w->column_segments(layer + ".weight", layer_shape(layer), {});
    ASSERT_FALSE(segs.empty());
    // One segment per run of groups on one side of 4 bits, each in the block type of its side.
    std::vector<std::pair<bool, int64_t>> want;  // (W8, columns)
    for (const auto& g : groups[layer]) {
      const bool w8 = g[0].get<int>() > 4;
      if (want.empty() || want.back().first != w8) want.emplace_back(w8, 0);
      want.back().second += g[1].get<int64_t>();
    }
    ASSERT_EQ(segs.size(), want.size());
    for (size_t i = 0; i < segs.size(); ++i) {
      const DType t = segs[i].dtype;
      EXPECT_EQ(t == DType::W8G32 || t == DType::W8G128, want[i].first) << "segment " << i << " " << dtype_name(t);
      EXPECT_EQ(static_cast<int64_t>(segs[i].columns.size()), want[i].second) << "segment " << i;
    }
    EXPECT_EQ(fnv1a64(segments_dequantized(*w, layer + ".weight", layer_shape(layer))), hash);
  }
}

// Column-parallel ranks keep their rows of every segment; a row-parallel rank reorders its own
// input columns, and keeps them in blocks when each group's share is whole 32-column pieces, else
// has no segments (the layer is then read dequantized). Either way its values are its slice.
TEST(ColumnSegments, TensorParallelShardsAreSlicesOfTheWhole) {
  for (const std::string& dir : {kActOrder, kExl2}) {
    const auto w = open_checkpoint(dir);
    int kept = 0;
    for (const auto& [layer, hash] : linear_layers(dir)) {
      SCOPED_TRACE(layer);
      const std::vector<int64_t> full = layer_shape(layer);
      const std::string name = layer + ".weight";
      const HostTensor whole = w->load(name, full, DType::F32);
      const float* all = whole.buffer.as<float>();
      for (int rank = 0; rank < 2; ++rank) {
        const std::vector<float> rows = segments_dequantized(*w, name, full, ShardSpec::split(0, rank, 2));
        ASSERT_EQ(rows.size(), static_cast<size_t>(full[0] * full[1] / 2));
        EXPECT_TRUE(std::equal(rows.begin(), rows.end(), all + rank * (full[0] / 2) * full[1])) << "rank " << rank;
        const std::vector<float> cols = segments_dequantized(*w, name, full, ShardSpec::split(1, rank, 2));
        if (cols.empty()) continue;
        ++kept;
        const int64_t half = full[1] / 2;
        for (int64_t r = 0; r < full[0]; ++r) {
          ASSERT_TRUE(
              std::equal(cols.begin() + r * half, cols.begin() + (r + 1) * half, all + r * full[1] + rank * half))
              << "rank " << rank << " row " << r;
        }
      }
    }
    RecordProperty(dir.substr(dir.rfind('/') + 1) + "_column_shards_kept", kept);
  }
}

// Resident bytes: act-order GPTQ in W4G32 blocks plus 4 bytes of column index per input, against the
// checkpoint's qweight, qzeros, scales and g_idx (groups of 64 in 32-value blocks repeat each scale:
// the 1.16x of AWQ g64, no W4G64 type); EXL2 in W4/W8 blocks against its q_weight, q_scale,
// q_scale_max, q_invperm, q_perm and q_groups, and against the 16 bits a weight it took dequantized.
TEST(ColumnSegments, ResidentBytesAgainstTheCheckpoint) {
  for (const std::string& dir : {kActOrder, kExl2}) {
    SCOPED_TRACE(dir);
    const auto w = open_checkpoint(dir);
    SafetensorsFile f(dir + "/model.safetensors");
    double ours = 0, theirs = 0, f16 = 0;
    for (const auto& [layer, hash] : linear_layers(dir)) {
      const std::vector<int64_t> full = layer_shape(layer);
      for (const ColumnSegment& s : w->column_segments(layer + ".weight", full, {})) {
        const auto k = static_cast<int64_t>(s.columns.size());
        ours += static_cast<double>(dtype_nbytes(s.dtype, full[0] * k) + 4 * k);
      }
      f16 += 2.0 * static_cast<double>(full[0] * full[1]);
      for (const char* part : {".qweight", ".qzeros", ".scales", ".g_idx", ".q_weight", ".q_scale", ".q_scale_max",
                               ".q_invperm", ".q_perm", ".q_groups"}) {
        if (const SafetensorsTensor* t = f.find(layer + part)) theirs += static_cast<double>(t->nbytes);
      }
    }
    const double ratio = ours / theirs;
    RecordProperty(dir.substr(dir.rfind('/') + 1) + "_ratio", std::to_string(ratio));
    RecordProperty(dir.substr(dir.rfind('/') + 1) + "_of_f16", std::to_string(ours / f16));
    if (dir == kActOrder) {
      EXPECT_LE(ratio, 1.2);
      EXPECT_GE(ratio, 0.9);
    } else {
      EXPECT_LT(ours, 0.5 * f16);  // 5 or 9 bits a weight against 16
      EXPECT_LE(ratio, 1.8);
    }
  }
}

TEST(ColumnSegments, CutRuleKeepsGroupsWholeAndSplitsAtWidthChanges) {
  auto groups = [](std::initializer_list<std::pair<int32_t, int>> runs) {
    std::vector<int32_t> g;
    for (auto [id, n] : runs) g.insert(g.end(), static_cast<size_t>(n), id);
    return g;
  };
  // One kind, groups of 128: 128-value blocks.
  auto cuts = cut_column_segments(groups({{0, 128}, {1, 128}}), std::vector<int>(256, 4));
  ASSERT_TRUE(cuts.has_value());
  ASSERT_EQ(cuts->size(), 1u);
  EXPECT_EQ((*cuts)[0].block, 128);
  // A group of 64 anywhere in the segment: 32-value blocks.
  cuts = cut_column_segments(groups({{0, 128}, {1, 64}}), std::vector<int>(192, 4));
  ASSERT_TRUE(cuts.has_value());
  EXPECT_EQ((*cuts)[0].block, 32);
  // Kinds 8 | 4 | 8: three segments at the changes, each with its own block.
  std::vector<int> kinds(96, 8);
  kinds.insert(kinds.end(), 128, 4);
  kinds.insert(kinds.end(), 32, 8);
  cuts = cut_column_segments(groups({{0, 96}, {1, 128}, {2, 32}}), kinds);
  ASSERT_TRUE(cuts.has_value());
  ASSERT_EQ(cuts->size(), 3u);
  EXPECT_EQ((*cuts)[0].begin, 0);
  EXPECT_EQ((*cuts)[1].begin, 96);
  EXPECT_EQ((*cuts)[1].block, 128);
  EXPECT_EQ((*cuts)[2].begin, 224);
  EXPECT_EQ((*cuts)[2].end, 256);
  // A group's run that is not whole 32-column pieces: none.
  EXPECT_FALSE(cut_column_segments(groups({{0, 48}, {1, 16}}), std::vector<int>(64, 4)).has_value());
  // Sorting is stable: equal keys keep their order.
  const std::vector<int32_t> key = {2, 0, 2, 1, 0};
  EXPECT_EQ(sorted_columns(0, 5, key.data()), (std::vector<int32_t>{1, 4, 3, 0, 2}));
  EXPECT_EQ(sorted_columns(2, 5, key.data()), (std::vector<int32_t>{2, 1, 0}));
}

}  // namespace
}  // namespace cypris
