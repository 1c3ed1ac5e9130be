// Cutting a layer's input columns, reordered so that each quantization group is contiguous
// (act-order GPTQ: sorted by g_idx; EXL2: in its packed order), into the segments of
// WeightSource::column_segments: maximal runs of groups of one kind (a bit-width class, so one block
// type), each in the largest block (128, else 32 values) that never straddles two groups.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace cypris {

struct SegmentCut {
  int64_t begin = 0, end = 0;  // positions in the reordered columns
  int kind = 0;                // the kind of its groups
  int block = 0;               // 128 or 32
};

// group_at[i], kind_at[i]: the group and kind of the i-th reordered column (the columns of a group
// must be contiguous). nullopt when some run of a group is not a whole number of 32 columns (the
// layer then cannot be kept in blocks).
std::optional<std::vector<SegmentCut>> cut_column_segments(const std::vector<int32_t>& group_at,
                                                           const std::vector<int>& kind_at);

// The columns [k0, k1) sorted by key (stable), as indices relative to k0.
std::vector<int32_t> sorted_columns(int64_t k0, int64_t k1, const int32_t* key);

}  // namespace cypris
