// Reading the integer layouts of GPTQ and AWQ checkpoints and repacking a layer's rows into the
// W4G32 / W4G64 / W4G128 / W8G32 / W8G128 blocks of kernels/common/wq_blocks.h (or dequantizing them).
//
// A layer of `out` rows (output features) and `in` columns (input features), `bits` per value,
// groups of `group` input columns with one scale and zero point per (group, output):
//  GPTQ  qweight [in * bits / 32, out] int32: value (n, k) in word (k / (32 / bits), n) at bit
//        bits * (k % (32 / bits)); qzeros [groups, out * bits / 32] int32 the same way along n;
//        scales [groups, out]; g_idx [in] the group of each input column (AutoGPTQ's QuantLinear.pack).
//        v1 checkpoints (checkpoint_format gptq) store zero - 1. 3 bits: each run of 32 values (along
//        k in qweight, n in qzeros) fills 3 words, value j at bits 3j .. 3j + 2 of their 96 bits.
//  AWQ   qweight [in, out / 8] int32: value (n, k) in word (k, n / 8) at bit 4 * p where the packed
//        position p of column n % 8 follows AutoAWQ's order map [0, 2, 4, 6, 1, 3, 5, 7]
//        (position i holds column order[i]); qzeros [groups, out / 8] likewise (WQLinear_GEMM).
//  compressed-tensors pack-quantized (pack_to_int32): weight_packed [out, in * bits / 32] int32,
//        value (n, k) in word (n, k / (32 / bits)) at bit bits * (k % (32 / bits)), stored as the
//        signed value + 2^(bits - 1); weight_scale [out, groups]; asymmetric weight_zero_point packed
//        the same way along the outputs, [out * bits / 32, groups]; symmetric: zero 2^(bits - 1).
//  Marlin (GPTQ checkpoint_format marlin: Marlin's Layer.pack, as AutoGPTQ's MarlinQuantLinear and
//        vLLM's marlin method store it), 4-bit symmetric (zero 8): B [in / 16, out * 2] int32 holds
//        the [in, out] weight cut into 16 x 16 tiles, each row of tiles (16 inputs) flattened tile
//        by tile (value (k, n) at t = (n / 16) * 256 + (k % 16) * 16 + n % 16 of row k / 16), then
//        each run of 1024 permuted by Marlin's tensor-core fragment order (marlin_perm) and packed
//        8 values per int32 (nibble i = value 8w + i); s [groups, out] fp16, each run of 64 (32 when
//        the layer has one group) permuted by Marlin's scale order.
// Weights are w = scale * (q - zero), exactly.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris::quant {

enum class WqLayout { Gptq, Awq, PackedInt, Marlin };

// Where Marlin's permutations put value t of a run of 1024 (weights) and entry j of a run of 64 or
// 32 (scales): the inverses of Marlin's _perm, _scale_perm and _scale_perm_single.
int marlin_weight_pos(int t);
int marlin_scale_pos(int j, bool single_group);

struct WqLayer {
  WqLayout layout = WqLayout::Gptq;
  int bits = 4;
  int64_t in = 0, out = 0;
  int64_t group = 0;           // > 0 (a whole row when the checkpoint says -1)
  bool zero_plus_one = false;  // GPTQ v1
  const int32_t* qweight = nullptr;
  const int32_t* qzeros = nullptr;
  const uint16_t* scales = nullptr;  // fp16 bits, [groups, out] ([out, groups] for PackedInt)
  const int32_t* g_idx = nullptr;    // [in] or null (then k / group)

  int64_t groups() const { return (in + group - 1) / group; }
  int value(int64_t n, int64_t k) const;
  int zero(int64_t g, int64_t n) const;
  uint16_t scale(int64_t g, int64_t n) const {
    if (layout == WqLayout::Marlin) {
      const bool single = groups() == 1;
      const int64_t run = single ? 32 : 64, f = g * out + n;
      return scales[f / run * run + marlin_scale_pos(static_cast<int>(f % run), single)];
    }
    return layout == WqLayout::PackedInt ? scales[n * groups() + g] : scales[g * out + n];
  }
  int64_t group_of(int64_t k) const { return g_idx ? g_idx[k] : k / group; }
};

// The block type a layer is repacked into: W4 for 2, 3 and 4 bits, W8 for 8; 128-value blocks when
// the groups and the rows are whole multiples of 128, else (4-bit) 64-value blocks when they are
// multiples of 64, else 32-value blocks. Throws when the group is not a multiple of 32.
DType wq_repack_type(int bits, int64_t group, int64_t in);

// The first input column (k) whose block of `block` columns mixes groups (g_idx out of order:
// act-order), or -1 when every block lies in one group.
int64_t wq_first_mixed_block(const WqLayer& l, int block);

// Rows [n0, n1), columns [k0, k1) of the layer as blocks of `type` (row-major, (k1 - k0) / block
// blocks per row); k0 and k1 - k0 multiples of the block, every block in one group.
void wq_repack(const WqLayer& l, DType type, int64_t n0, int64_t n1, int64_t k0, int64_t k1, void* dst);

// Rows [n0, n1) with the checkpoint's columns cols[0 .. ncols) in that order (act-order layers,
// their columns sorted by group) as blocks of `type`; every block's columns in one group (checked).
void wq_repack_columns(const WqLayer& l, DType type, int64_t n0, int64_t n1, const int32_t* cols, int64_t ncols,
                       void* dst);

// The same rows and columns dequantized to fp32, scale * (q - zero) exactly.
void wq_dequantize(const WqLayer& l, int64_t n0, int64_t n1, int64_t k0, int64_t k1, float* dst);

}  // namespace cypris::quant
