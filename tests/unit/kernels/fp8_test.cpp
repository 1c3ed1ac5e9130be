// fp8 conversions (kernels/common/fp8.h) against hand-computed values derived from the format
// definitions, an exhaustive decode -> encode round trip of all 256 codes, and a brute-force
// reference (decode by the textbook formula with ldexp, encode by searching every code for the
// nearest value, ties to the even mantissa) on many random and boundary inputs.
#include "kernels/common/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace cypris {
namespace {

struct Case {
  float in;
  uint8_t code;
  float decoded;  // value of `code`
};

// e4m3: value = (-1)^s * 2^(e - 7) * (1 + m/8) for e in 1..15, and 2^-6 * m/8 for e = 0.
// Codes are written s.eeee.mmm.
const Case kE4M3[] = {
    {0.0f, 0x00, 0.0f},
    {-0.0f, 0x80, -0.0f},                                    // sign kept: 1.0000.000
    {1.0f, 0x38, 1.0f},                                      // e = 7 (0111), m = 0 -> 0.0111.000
    {-2.0f, 0xC0, -2.0f},                                    // e = 8 (1000) -> 1.1000.000
    {1.125f, 0x39, 1.125f},                                  // 1 + 1/8 -> m = 1
    {1.0625f, 0x38, 1.0f},                                   // halfway 1 and 1.125: tie to even m = 0
    {1.1875f, 0x3A, 1.25f},                                  // halfway 1.125 (m=1) and 1.25 (m=2): tie to even m = 2
    {1.07f, 0x39, 1.125f},                                   // above the halfway point 1.0625 -> up
    {448.0f, 0x7E, 448.0f},                                  // max: e = 15, m = 6: 2^8 * 1.75 = 448 (m = 7 is NaN)
    {464.0f, 0x7E, 448.0f},                                  // halfway 448 and (non-existent) 480: saturates
    {1000.0f, 0x7E, 448.0f},                                 // beyond max: saturates
    {-1e30f, 0xFE, -448.0f},                                 // saturates with the sign
    {std::numeric_limits<float>::infinity(), 0x7E, 448.0f},  // saturating: inf -> max
    {0.015625f, 0x08, 0.015625f},                            // 2^-6, smallest normal: e = 1, m = 0
    {0.013671875f, 0x07, 0.013671875f},                      // 2^-6 * 7/8, largest subnormal: e = 0, m = 7
    {0.001953125f, 0x01, 0.001953125f},                      // 2^-9, smallest subnormal: m = 1
    {0.0009765625f, 0x00, 0.0f},                             // 2^-10 = half the smallest subnormal: tie to even 0
    {0.00098f, 0x01, 0.001953125f},                          // just above half: rounds up to 2^-9
    {0.0029296875f, 0x02, 0.00390625f},                      // 1.5 * 2^-9: tie between m=1 and m=2 -> even 2
    {-0.0048828125f, 0x82, -0.00390625f},                    // -2.5 * 2^-9: tie between 2 and 3 -> even 2
    {0.0146484375f, 0x08, 0.015625f},  // 7.5 * 2^-9: tie between subnormal 7 and normal 2^-6 -> even 8
    {1e-30f, 0x00, 0.0f},              // far below: zero
    {3.0f, 0x44, 3.0f},                // 2^1 * 1.5: e = 8, m = 4 -> 0.1000.100
    {240.0f, 0x77, 240.0f},            // 2^7 * 1.875: e = 14, m = 7
    {248.0f, 0x78, 256.0f},            // halfway 240 (m=7) and 256: tie to even (256 has m = 0)
};

// e5m2: value = (-1)^s * 2^(e - 15) * (1 + m/4) for e in 1..30, 2^-14 * m/4 for e = 0; e = 31 inf/NaN.
// Codes are written s.eeeee.mm.
const Case kE5M2[] = {
    {0.0f, 0x00, 0.0f},
    {-0.0f, 0x80, -0.0f},
    {1.0f, 0x3C, 1.0f},                                          // e = 15 (01111), m = 0 -> 0.01111.00
    {-1.5f, 0xBE, -1.5f},                                        // e = 15, m = 2
    {1.125f, 0x3C, 1.0f},                                        // halfway 1 and 1.25: tie to even m = 0
    {1.375f, 0x3E, 1.5f},                                        // halfway 1.25 (m=1) and 1.5 (m=2): even m = 2
    {57344.0f, 0x7B, 57344.0f},                                  // max: e = 30, m = 3: 2^15 * 1.75
    {61440.0f, 0x7B, 57344.0f},                                  // halfway to 2^16 (which would be inf): saturates
    {1e10f, 0x7B, 57344.0f},                                     // saturates
    {-std::numeric_limits<float>::infinity(), 0xFB, -57344.0f},  // saturating: -inf -> -max
    {6.103515625e-05f, 0x04, 6.103515625e-05f},                  // 2^-14, smallest normal: e = 1, m = 0
    {1.52587890625e-05f, 0x01, 1.52587890625e-05f},              // 2^-16, smallest subnormal
    {7.62939453125e-06f, 0x00, 0.0f},                            // 2^-17: half the smallest subnormal, tie to even 0
    {2.288818359375e-05f, 0x02, 3.0517578125e-05f},              // 1.5 * 2^-16: tie 1/2 -> even 2
    {0.1f, 0x2E, 0.09375f},  // 0.1 = 1.6 * 2^-4: e = 11, m = 2.4 -> 2 (1.5 * 2^-4 = 0.09375)
};

TEST(Fp8, E4M3HandComputed) {
  for (const Case& c : kE4M3) {
    SCOPED_TRACE(testing::Message() << "input " << c.in);
    EXPECT_EQ(f32_to_fp8_e4m3(c.in), c.code);
    const float d = fp8_e4m3_to_f32(c.code);
    EXPECT_EQ(d, c.decoded);
    EXPECT_EQ(std::signbit(d), std::signbit(c.decoded));
  }
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xFF)));
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
}

TEST(Fp8, E5M2HandComputed) {
  for (const Case& c : kE5M2) {
    SCOPED_TRACE(testing::Message() << "input " << c.in);
    EXPECT_EQ(f32_to_fp8_e5m2(c.in), c.code);
    const float d = fp8_e5m2_to_f32(c.code);
    EXPECT_EQ(d, c.decoded);
    EXPECT_EQ(std::signbit(d), std::signbit(c.decoded));
  }
  EXPECT_EQ(fp8_e5m2_to_f32(0x7C), std::numeric_limits<float>::infinity());  // 0.11111.00
  EXPECT_EQ(fp8_e5m2_to_f32(0xFC), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(0x7D)));
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Fp8, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if ((c & 0x7F) != 0x7F) EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(code)), code) << "e4m3 code " << c;
    // e5m2 infinities saturate to max by design, NaNs stay NaN: only finite codes round-trip.
    if ((c & 0x7C) != 0x7C) EXPECT_EQ(f32_to_fp8_e5m2(fp8_e5m2_to_f32(code)), code) << "e5m2 code " << c;
  }
}

// The textbook decoding, independent of the bit tricks in fp8.h.
double reference_decode(int code, int mant_bits, int bias) {
  const int sign = code >> 7;
  const int e = (code & 0x7F) >> mant_bits;
  const int m = code & ((1 << mant_bits) - 1);
  const double mag =
      e == 0 ? std::ldexp(m, 1 - bias - mant_bits) : std::ldexp((1 << mant_bits) + m, e - bias - mant_bits);
  return sign ? -mag : mag;
}

// Nearest finite code by exhaustive search over the non-negative codes up to max_code; ties go to the
// even mantissa (the lowest bit of the code); beyond max saturates.
uint8_t reference_encode(float x, int mant_bits, int bias, int max_code) {
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_err = INFINITY;
  for (int c = 0; c <= max_code; ++c) {
    const double err = std::fabs(reference_decode(c, mant_bits, bias) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
}

TEST(Fp8, MatchesBruteForceReference) {
  std::vector<float> inputs;
  // Every midpoint between neighbouring codes, and a hair either side of it (the tie cases).
  for (int mant : {3, 2}) {
    const int bias = mant == 3 ? 7 : 15;
    const int max_code = mant == 3 ? 0x7E : 0x7B;
    for (int c = 0; c < max_code; ++c) {
      const float mid = static_cast<float>((reference_decode(c, mant, bias) + reference_decode(c + 1, mant, bias)) / 2);
      inputs.push_back(mid);
      inputs.push_back(std::nextafter(mid, 0.0f));
      inputs.push_back(std::nextafter(mid, INFINITY));
      inputs.push_back(-mid);
    }
  }
  std::mt19937 g(7);
  std::uniform_real_distribution<float> log_mag(-22.0f, 18.0f);
  for (int i = 0; i < 20000; ++i) {
    const float v = std::exp2(log_mag(g));
    inputs.push_back(i % 2 ? v : -v);
  }
  for (float x : inputs) {
    ASSERT_EQ(f32_to_fp8_e4m3(x), reference_encode(x, 3, 7, 0x7E)) << "e4m3 input " << x;
    ASSERT_EQ(f32_to_fp8_e5m2(x), reference_encode(x, 2, 15, 0x7B)) << "e5m2 input " << x;
  }
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) != 0x7F) EXPECT_EQ(fp8_e4m3_to_f32(static_cast<uint8_t>(c)), reference_decode(c, 3, 7));
    if ((c & 0x7C) != 0x7C) EXPECT_EQ(fp8_e5m2_to_f32(static_cast<uint8_t>(c)), reference_decode(c, 2, 15));
  }
}

}  // namespace
}  // namespace cypris
