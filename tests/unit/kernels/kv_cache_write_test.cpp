// write_kv_cache_cpu on every instruction-set path this CPU has: each path stores exactly the bits of
// the scalar conversions (f32_to_f16 / f32_to_bf16 in dtype.h, f32_to_fp8_* in fp8.h, themselves
// tested against their formats in fp8_test.cpp and cpu_kernels_test.cpp) for values across the whole
// range: normal numbers, exact ties between two neighbouring codes, subnormals of the target format,
// overflow, infinities, NaN and signed zeros — in rows whose widths leave vector tails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/common/dtype.h"
#include "kernels/common/fp8.h"
#include "kernels/cpu/attention.h"

namespace cypris {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Values that probe the conversions to `dt` (before the scale is applied: the writer divides by it).
std::vector<float> probe_values(DType dt, float scale) {
  std::vector<float> x;
  std::mt19937 g(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int i = 0; i < 2000; ++i) x.push_back(n(g) * std::exp2(static_cast<float>(i % 40 - 20)));
  // Every fp8 code's value, the midpoints between neighbours (ties) and values just beside them.
  for (int c = 0; c < 0x7f; ++c) {
    const auto lo = static_cast<uint8_t>(c), hi = static_cast<uint8_t>(c + 1);
    const float a = dt == DType::F8E5M2 ? fp8_e5m2_to_f32(lo) : fp8_e4m3_to_f32(lo);
    const float b = dt == DType::F8E5M2 ? fp8_e5m2_to_f32(hi) : fp8_e4m3_to_f32(hi);
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    const float mid = (a + b) / 2;
    for (float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      x.push_back(v * scale);
      x.push_back(-v * scale);
    }
  }
  // 16-bit ties: halfway between two fp16 / bf16 neighbours, normal and subnormal.
  for (uint32_t h : {0x0001u, 0x0002u, 0x03ffu, 0x0400u, 0x3c00u, 0x3c01u, 0x7bffu}) {
    const float a = f16_to_f32(static_cast<uint16_t>(h)), b = f16_to_f32(static_cast<uint16_t>(h + 1));
    x.push_back((a + b) / 2);
    x.push_back(-(a + b) / 2);
  }
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x00008000u, 0x7f7f8000u}) x.push_back(from_bits(u));
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 65519.0f, 1e6f, -1e6f, 448.0f, 464.0f, 465.0f, 57344.0f, 61440.0f,
                  inf, -inf, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::min(), 3.4e38f}) {
    x.push_back(v * (dt == DType::F8E4M3 || dt == DType::F8E5M2 ? scale : 1.0f));
  }
  return x;
}

// The cache bytes of each element as the scalar conversions give them.
std::vector<uint8_t> expected_bytes(const std::vector<float>& x, DType dt, float scale) {
  std::vector<uint8_t> out;
  for (float v : x) {
    if (dt == DType::F16 || dt == DType::BF16) {
      const uint16_t h = dt == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      out.push_back(static_cast<uint8_t>(h & 0xff));
      out.push_back(static_cast<uint8_t>(h >> 8));
    } else {
      out.push_back(dt == DType::F8E4M3 ? f32_to_fp8_e4m3(v / scale) : f32_to_fp8_e5m2(v / scale));
    }
  }
  return out;
}

TEST(KvCacheWrite, EveryPathStoresTheScalarConversionsBits) {
  for (DType dt : {DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
    const bool fp8 = dt == DType::F8E4M3 || dt == DType::F8E5M2;
    const float k_scale = fp8 ? 0.037f : 1.0f, v_scale = fp8 ? 3.0f : 1.0f;
    for (int64_t width : {int64_t{37}, int64_t{64}, int64_t{3}}) {  // tails of 5 / 0 / 3 (3: no vector step)
      const std::vector<float> probe = probe_values(dt, k_scale);
      const int64_t tokens = static_cast<int64_t>(probe.size()) / width;
      const std::vector<float> k(probe.begin(), probe.begin() + tokens * width);
      std::vector<float> v = k;
      for (float& x : v) x *= v_scale / k_scale;  // the same codes' neighbourhoods for V's scale
      std::vector<int64_t> slots(tokens);
      for (int64_t t = 0; t < tokens; ++t) slots[t] = tokens - 1 - t;  // reversed
      const std::vector<uint8_t> want_k = expected_bytes(k, dt, k_scale), want_v = expected_bytes(v, dt, v_scale);
      const size_t elem = dtype_size(dt);
      for (CpuIsa isa : {CpuIsa::Auto, CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Scalar}) {
        if (!cpu_has_isa(isa)) continue;
        std::vector<uint8_t> kc(k.size() * elem, 0xAB), vc(v.size() * elem, 0xAB);
        write_kv_cache_cpu(k.data(), width, v.data(), width, tokens, slots.data(), width, kc.data(), vc.data(), tokens,
                           dt, k_scale, v_scale, isa);
        int bad = 0;
        for (int64_t t = 0; t < tokens && bad < 5; ++t) {
          for (int64_t i = 0; i < width * static_cast<int64_t>(elem); ++i) {
            const size_t got = static_cast<size_t>(slots[t] * width) * elem + i;
            const size_t want = static_cast<size_t>(t * width) * elem + i;
            if (kc[got] != want_k[want] || vc[got] != want_v[want]) {
              ADD_FAILURE() << dtype_name(dt) << " " << cpu_isa_name(isa) << " width " << width << ": token " << t
                            << " element " << i / elem << " = " << k[t * width + i / elem] << " stored K byte "
                            << int(kc[got]) << " want " << int(want_k[want]) << ", V byte " << int(vc[got]) << " want "
                            << int(want_v[want]);
              ++bad;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cypris
