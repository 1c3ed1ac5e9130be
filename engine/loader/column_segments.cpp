#include "engine/loader/column_segments.h"

#include <algorithm>
#include <numeric>

#include "kernels/cpu/thread_pool.h"

namespace cypris {

std::optional<std::vector<SegmentCut>> cut_column_segments(const std::vector<int32_t>& group_at,
                                                           const std::vector<int>& kind_at) {
  const auto n = static_cast<int64_t>(group_at.size());
  std::vector<SegmentCut> cuts;
  bool big = true;  // every group run of the current segment a multiple of 128
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    while (j < n && group_at[static_cast<size_t>(j)] == group_at[static_cast<size_t>(i)]) ++j;
    const int64_t run = j - i;
    if (run % 32 != 0) return std::nullopt;
    const int kind = kind_at[static_cast<size_t>(i)];
    if (cuts.empty() || cuts.back().kind != kind) {
      if (!cuts.empty()) cuts.back().block = big ? 128 : 32;
      cuts.push_back({i, j, kind, 0});
      big = true;
    } else {
      cuts.back().end = j;
    }
    big = big && run % 128 == 0;
    i = j;
  }
  if (!cuts.empty()) cuts.back().block = big ? 128 : 32;
  return cuts;
}

std::vector<int32_t> sorted_columns(int64_t k0, int64_t k1, const int32_t* key) {
  std::vector<int32_t> cols(static_cast<size_t>(k1 - k0));
  std::iota(cols.begin(), cols.end(), 0);
  std::stable_sort(cols.begin(), cols.end(), [&](int32_t a, int32_t b) { return key[k0 + a] < key[k0 + b]; });
  return cols;
}

void read_column_segment(const ColumnSegment& seg, const std::vector<int64_t>& local, const ShardSpec& shard, void* dst,
                         const SegmentRepack& repack) {
  const int64_t n0 = shard.dim == 0 ? shard.rank * local[0] : 0;
  const int64_t k0 = shard.dim == 1 ? shard.rank * local[1] : 0;
  std::vector<int32_t> cols(seg.columns.size());
  for (size_t i = 0; i < cols.size(); ++i) cols[i] = static_cast<int32_t>(k0 + seg.columns[i]);
  const auto ncols = static_cast<int64_t>(cols.size());
  const size_t row_bytes = dtype_nbytes(seg.dtype, ncols);
  shared_thread_pool().parallel_for(
      local[0],
      [&](int64_t r0, int64_t r1) {
        repack(n0 + r0, n0 + r1, cols.data(), ncols, static_cast<char*>(dst) + static_cast<size_t>(r0) * row_bytes);
      },
      16);
}

}  // namespace cypris
