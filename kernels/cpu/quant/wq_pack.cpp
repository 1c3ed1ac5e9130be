#include "kernels/cpu/quant/wq_pack.h"

#include <cstring>

#include "engine/common/error.h"
#include "kernels/common/wq_blocks.h"

namespace cypris::quant {
namespace {

// AutoAWQ packs column order[i] of each 8 at nibble i; column j is therefore at nibble kAwqPos[j].
constexpr int kAwqPos[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// AutoGPTQ's 3-bit packing: each run of 32 values fills three words, value j of the run at bits
// 3j .. 3j + 2 of their 96 bits (word 0's low bit first; values 10 and 21 straddle two words).
// word(i) is the run's i-th word.
template <typename Word>
int value3(int j, Word word) {
  const int bit = 3 * j, w = bit / 32, off = bit % 32;
  uint32_t v = static_cast<uint32_t>(word(w)) >> off;
  if (off > 29) v |= static_cast<uint32_t>(word(w + 1)) << (32 - off);
  return static_cast<int>(v & 7u);
}

// The inverse permutations of Marlin's _get_perms: for the weights, per thread i of 32 the values of
// its two 16 x 8 fragment blocks (rows 2(i%4), +1, 2(i%4+4), +1, column i / 4, +8) in each of four
// 16 x 16 tiles, each 8 interleaved [0, 2, 4, 6, 1, 3, 5, 7]; for the scales, runs of 8 transposed
// (grouped) or pairs of each 8 of 32 (one group).
struct MarlinInverse {
  int weight[1024];
  int scale[64];
  int scale_single[32];
  MarlinInverse() {
    int perm[1024], n = 0;
    for (int i = 0; i < 32; ++i) {
      int perm1[8], m = 0;
      for (int block = 0; block < 2; ++block) {
        for (int row : {2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1}) {
          perm1[m++] = 16 * row + i / 4 + 8 * block;
        }
      }
      for (int j = 0; j < 4; ++j)
        for (int p : perm1) perm[n++] = p + 256 * j;
    }
    constexpr int kInterleave[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    for (int r = 0; r < 128; ++r)
      for (int t = 0; t < 8; ++t) weight[perm[8 * r + kInterleave[t]]] = 8 * r + t;
    for (int i = 0, j = 0; i < 8; ++i)
      for (int k = 0; k < 8; ++k) scale[i + 8 * k] = j++;
    for (int i = 0, j = 0; i < 4; ++i)
      for (int k : {0, 1, 8, 9, 16, 17, 24, 25}) scale_single[2 * i + k] = j++;
  }
};

const MarlinInverse& marlin_inverse() {
  static const MarlinInverse inv;
  return inv;
}

// Output block b of row n holds the checkpoint's columns col(kb .. kb + N) with kb = b * N: col(k) is
// k0 + k in the checkpoint's order, or cols[k] when the columns are reordered (act-order).
struct Columns {
  int64_t k0 = 0;
  const int32_t* cols = nullptr;
  int64_t operator()(int64_t k) const { return cols ? cols[k] : k0 + k; }
};

template <int N>
void repack_w4(const WqLayer& l, int64_t n0, int64_t n1, Columns col, int64_t ncols, void* dst) {
  auto* out = static_cast<BlockW4<N>*>(dst);
  const int64_t per_row = ncols / N;
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t b = 0; b < per_row; ++b) {
      BlockW4<N>& blk = out[(n - n0) * per_row + b];
      const int64_t kb = b * N;
      const int64_t g = l.group_of(col(kb));
      blk.d = l.scale(g, n);
      blk.z = static_cast<int16_t>(l.zero(g, n));
      for (int s = 0; s < N / 32; ++s) {
        for (int j = 0; j < 16; ++j) {
          const int lo = l.value(n, col(kb + 32 * s + j)), hi = l.value(n, col(kb + 32 * s + 16 + j));
          blk.qs[16 * s + j] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
    }
  }
}

template <int N>
void repack_w8(const WqLayer& l, int64_t n0, int64_t n1, Columns col, int64_t ncols, void* dst) {
  auto* out = static_cast<BlockW8<N>*>(dst);
  const int64_t per_row = ncols / N;
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t b = 0; b < per_row; ++b) {
      BlockW8<N>& blk = out[(n - n0) * per_row + b];
      const int64_t kb = b * N;
      const int64_t g = l.group_of(col(kb));
      blk.d = l.scale(g, n);
      blk.z = static_cast<int16_t>(l.zero(g, n) - 128);
      for (int i = 0; i < N; ++i) blk.qs[i] = static_cast<int8_t>(l.value(n, col(kb + i)) - 128);
    }
  }
}

void repack(const WqLayer& l, DType type, int64_t n0, int64_t n1, Columns col, int64_t ncols, void* dst) {
  switch (type) {
    case DType::W4G32:
      return repack_w4<32>(l, n0, n1, col, ncols, dst);
    case DType::W4G64:
      return repack_w4<64>(l, n0, n1, col, ncols, dst);
    case DType::W4G128:
      return repack_w4<128>(l, n0, n1, col, ncols, dst);
    case DType::W8G32:
      return repack_w8<32>(l, n0, n1, col, ncols, dst);
    case DType::W8G128:
      return repack_w8<128>(l, n0, n1, col, ncols, dst);
    default:
      CYPRIS_FAIL("quantized layer: {} is not a repacked checkpoint type", dtype_name(type));
  }
}

}  // namespace

int marlin_weight_pos(int t) { return marlin_inverse().weight[t]; }
int marlin_scale_pos(int j, bool single_group) {
  return single_group ? marlin_inverse().scale_single[j] : marlin_inverse().scale[j];
}

int WqLayer::value(int64_t n, int64_t k) const {
  if (layout == WqLayout::Marlin) {
    const int64_t f = (k / 16) * out * 16 + (n / 16) * 256 + (k % 16) * 16 + n % 16;
    const int64_t p = f / 1024 * 1024 + marlin_weight_pos(static_cast<int>(f % 1024));
    return static_cast<int>((static_cast<uint32_t>(qweight[p / 8]) >> (4 * (p % 8))) & 0xFu);
  }
  if (layout == WqLayout::Gptq && bits == 3) {
    const int64_t row = (k / 32) * 3;
    return value3(static_cast<int>(k % 32), [&](int w) { return qweight[(row + w) * out + n]; });
  }
  const uint32_t mask = (1u << bits) - 1;
  if (layout == WqLayout::PackedInt) {
    const int per = 32 / bits;
    const uint32_t word = static_cast<uint32_t>(qweight[n * (in / per) + k / per]);
    return static_cast<int>((word >> (bits * (k % per))) & mask);
  }
  if (layout == WqLayout::Awq) {
    const uint32_t word = static_cast<uint32_t>(qweight[k * (out / 8) + n / 8]);
    return static_cast<int>((word >> (4 * kAwqPos[n % 8])) & mask);
  }
  const int per = 32 / bits;
  const uint32_t word = static_cast<uint32_t>(qweight[(k / per) * out + n]);
  return static_cast<int>((word >> (bits * (k % per))) & mask);
}

int WqLayer::zero(int64_t g, int64_t n) const {
  if (layout == WqLayout::Marlin) return 8;  // symmetric 4-bit
  if (layout == WqLayout::Gptq && bits == 3) {
    const int64_t col = g * (out * 3 / 32) + (n / 32) * 3;
    return value3(static_cast<int>(n % 32), [&](int w) { return qzeros[col + w]; }) + (zero_plus_one ? 1 : 0);
  }
  const uint32_t mask = (1u << bits) - 1;
  if (layout == WqLayout::PackedInt) {
    if (qzeros == nullptr) return 1 << (bits - 1);  // symmetric
    const int per = 32 / bits;
    const uint32_t word = static_cast<uint32_t>(qzeros[(n / per) * groups() + g]);
    return static_cast<int>((word >> (bits * (n % per))) & mask);
  }
  if (layout == WqLayout::Awq) {
    const uint32_t word = static_cast<uint32_t>(qzeros[g * (out / 8) + n / 8]);
    return static_cast<int>((word >> (4 * kAwqPos[n % 8])) & mask);
  }
  const int per = 32 / bits;
  const uint32_t word = static_cast<uint32_t>(qzeros[g * (out / per) + n / per]);
  return static_cast<int>((word >> (bits * (n % per))) & mask) + (zero_plus_one ? 1 : 0);
}

DType wq_repack_type(int bits, int64_t group, int64_t in) {
  CYPRIS_CHECK(group > 0 && group % 32 == 0, "quantized layer: group size {} is not a multiple of 32", group);
  const bool big = group % 128 == 0 && in % 128 == 0;
  if (bits == 8) return big ? DType::W8G128 : DType::W8G32;
  CYPRIS_CHECK(bits == 2 || bits == 3 || bits == 4, "quantized layer: {} bits are not supported (2, 3, 4, 8)", bits);
  if (big) return DType::W4G128;
  // Groups of 64 (or 128 on rows that are not whole 128s) in 64-value blocks: one scale per group
  // (4.5 bits a weight) where 32-value blocks would repeat it (5 bits).
  return group % 64 == 0 && in % 64 == 0 ? DType::W4G64 : DType::W4G32;
}

int64_t wq_first_mixed_block(const WqLayer& l, int block) {
  if (!l.g_idx) return -1;
  for (int64_t k = 0; k < l.in; k += block) {
    for (int64_t i = 1; i < block && k + i < l.in; ++i) {
      if (l.g_idx[k + i] != l.g_idx[k]) return k;
    }
  }
  return -1;
}

void wq_repack(const WqLayer& l, DType type, int64_t n0, int64_t n1, int64_t k0, int64_t k1, void* dst) {
  const int be = static_cast<int>(dtype_block(type).elems);
  CYPRIS_CHECK(k0 % be == 0 && (k1 - k0) % be == 0 && k1 <= l.in && n1 <= l.out,
               "quantized layer: columns [{}, {}) are not whole {} blocks of a row of {}", k0, k1, dtype_name(type),
               l.in);
  repack(l, type, n0, n1, Columns{k0, nullptr}, k1 - k0, dst);
}

void wq_repack_columns(const WqLayer& l, DType type, int64_t n0, int64_t n1, const int32_t* cols, int64_t ncols,
                       void* dst) {
  const int be = static_cast<int>(dtype_block(type).elems);
  CYPRIS_CHECK(ncols % be == 0 && n1 <= l.out, "quantized layer: {} columns are not whole {} blocks", ncols,
               dtype_name(type));
  for (int64_t k = 0; k < ncols; ++k) {
    CYPRIS_CHECK(cols[k] >= 0 && cols[k] < l.in && l.group_of(cols[k]) == l.group_of(cols[k - k % be]),
                 "quantized layer: reordered column {} ({}) is outside the layer or its block mixes groups", k,
                 cols[k]);
  }
  repack(l, type, n0, n1, Columns{0, cols}, ncols, dst);
}

void wq_dequantize(const WqLayer& l, int64_t n0, int64_t n1, int64_t k0, int64_t k1, float* dst) {
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t g = l.group_of(k);
      // q - zero is a small integer and the fp16 scale has 11 significant bits: exact in fp32.
      dst[(n - n0) * (k1 - k0) + (k - k0)] =
          f16_to_f32(l.scale(g, n)) * static_cast<float>(l.value(n, k) - l.zero(g, n));
    }
  }
}

}  // namespace cypris::quant
