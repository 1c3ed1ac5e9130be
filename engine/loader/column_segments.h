// Cutting a layer's input columns, reordered so that each quantization group is contiguous
// (act-order GPTQ: sorted by g_idx; EXL2: in its packed order), into the segments of
// WeightSource::column_segments: maximal runs of groups of one kind (a bit-width class, so one block
// type), each in the largest block (128, else 32 values) that never straddles two groups.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/loader/weights.h"

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

// Writes rows [row_begin, row_end) of the whole layer, over the whole layer's input columns
// cols[0..ncols), in the segment's block type to out (one packed row after the other).
using SegmentRepack =
    std::function<void(int64_t row_begin, int64_t row_end, const int32_t* cols, int64_t ncols, char* out)>;

// WeightSource::read_segment's common part: segment `seg` of a shard whose shape is `local` (the
// shard's rows, each the segment's columns as seg.dtype blocks) written to dst by `repack`, the
// rows split over the shared thread pool.
void read_column_segment(const ColumnSegment& seg, const std::vector<int64_t>& local, const ShardSpec& shard, void* dst,
                         const SegmentRepack& repack);

}  // namespace cypris
