// The byte layouts of llama.cpp's block-quantized weight types (as GGUF files store them) and the
// small decoding helpers every kernel needs: the IQ4 value table and the packed 6-bit scales of the
// K-quants. Shared by the CPU kernels (kernels/cpu/quant/) and the CUDA ones (kernels/cuda/quant/),
// so everything here is plain data or inline functions that compile for host and device.
//
// Every block is a sequence of bytes with no padding; fp16 scales are raw IEEE half bits
// (uint16_t) and multi-byte fields are little-endian, which is what x86 and CUDA read natively.
// See docs/quantization.md for what each field means.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CYPRIS_QHD __host__ __device__ __forceinline__
#else
#define CYPRIS_QHD inline
#endif

namespace cypris::quant {

constexpr int kQK = 32;    // elements of a "legacy" block (Q4_0 .. Q8_0, IQ4_NL)
constexpr int kQKK = 256;  // elements of a K-quant super-block (Q2_K .. Q6_K, IQ4_XS)

#pragma pack(push, 1)
// w = d * (q - 8), q the 4-bit value; qs[j] holds element j (low nibble) and j + 16 (high nibble).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// w = d * q + m.
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
// As Q4_0 with a fifth bit per element in qh (bit j of the little-endian uint32): w = d * (q - 16).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// w = d * q + m, q 5 bits.
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// w = d * q, q signed 8 bits.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// 16 groups of 16: w = d * (sc & 15) * q - dmin * (sc >> 4), q 2 bits. qs[32 * h + l] holds, at bit
// pair p, element 128 * h + 32 * p + l.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d, dmin;
};
// 16 groups of 16: w = d * (s - 32) * (q - 4 * !hbit), q 2 low bits laid out as Q2_K, the high bit of
// element 32 * b + l (b = 0..7) is bit b of hmask[l]; the 6-bit scales s are packed in 12 bytes.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 groups of 32: w = d * sc * q - dmin * m, 6-bit sc and m packed in 12 bytes; qs[32 * c + l] holds
// element 64 * c + l (low nibble) and 64 * c + 32 + l (high nibble).
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
// As Q4_K with a fifth bit: element 32 * b + l has its high bit at bit b of qh[l].
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// 16 groups of 16: w = d * scales[g] * (q - 32), q 6 bits: 4 low bits in ql, 2 high bits in qh.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
// w = d * kIq4Values[q], q a 4-bit index laid out as Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// 8 groups of 32: w = d * (ls - 32) * kIq4Values[q], ls 6 bits (4 in scales_l, 2 in scales_h).
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);

// The 16 non-uniform levels of IQ4_NL / IQ4_XS (fixed by the format).
#if defined(__CUDACC__)
__device__ __constant__
#endif
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// Q4_K / Q5_K: the 6-bit scale and min of group j (0..7) from the 12 packed bytes. Groups 0-3 keep
// theirs in the low 6 bits of bytes j and j + 4; groups 4-7 take 4 bits from byte j + 4 and the two
// spare high bits of bytes j - 4 (scale) and j (min).
CYPRIS_QHD void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q3_K: the 16 6-bit scales (each still biased by 32) from the 12 packed bytes: scale g has its low
// 4 bits in byte g % 8 (low nibble for g < 8, high for g >= 8) and its high 2 bits in byte 8 + g % 4
// at bit pair g / 4.
CYPRIS_QHD void k3_scales(const uint8_t* packed, int8_t out[16]) {
  for (int g = 0; g < 16; ++g) {
    const int low = (packed[g % 8] >> (g < 8 ? 0 : 4)) & 0xF;
    const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
    out[g] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

}  // namespace cypris::quant
