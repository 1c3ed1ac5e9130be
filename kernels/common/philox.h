// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
// counter-based generator of the samplers. Shared by the CUDA kernels, their CPU reference and the
// engine's CPU sampler so all draw the same uniform for the same (key, counter): written once,
// __host__ __device__, C++17.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CYPRIS_HD __host__ __device__ __forceinline__
#else
#define CYPRIS_HD inline
#endif

namespace cypris {

struct Philox4x32 {
  uint32_t v[4];
};

namespace philox_detail {

constexpr uint32_t kM0 = 0xD2511F53u;
constexpr uint32_t kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kW1 = 0xBB67AE85u;  // sqrt(3) - 1

CYPRIS_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

}  // namespace philox_detail

// Ten rounds of Philox4x32 on `ctr` under the 64-bit key (k0, k1).
CYPRIS_HD Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  using namespace philox_detail;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, ctr.v[0], hi0, lo0);
    mulhilo(kM1, ctr.v[2], hi1, lo1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

// The sampler's uniforms in [0, 1) (53 bits each) for a request's stream key and output position:
// counter = (position low, position high, 0, 0), key = (key low, key high). Lane 0 (words 0-1) is
// the draw of the token, lane 1 (words 2-3) the other per-position coin (XTC). The CPU sampler
// (engine/sampling/sampler.cpp) and the GPU sampler (kernels/cuda/sampling.cu) both draw from
// here, so a seeded request gets the same uniforms on either device, whatever its batch.
CYPRIS_HD double philox_uniform(uint64_t key, uint64_t position, int lane = 0) {
  const Philox4x32 r =
      philox4x32_10(Philox4x32{{static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), 0u, 0u}},
                    static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
  const uint32_t hi = lane == 0 ? r.v[0] : r.v[2];
  const uint32_t lo = lane == 0 ? r.v[1] : r.v[3];
  const uint64_t bits = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);  // 2^-53
}

}  // namespace cypris
