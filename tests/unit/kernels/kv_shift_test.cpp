// move_kv_slots_cpu (--context-shift by rotation) against a float64 formula written here: a raw key
// k is cached rotated to position p (Neox halves: pair (j, j + rot/2) turned by p * inv_freq_j), the
// op moves it with the rotation from p to q, and the result must be k rotated directly to q. A
// wrong sign of the angle, an interleaved pairing (2j, 2j + 1) or a rotation of the dims past
// rot_dim each miss that by O(|k|), far above the rounding bounds derived below per cache type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/common/dtype.h"
#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cpu/kv_shift.h"

namespace cypris {
namespace {

constexpr int kHeads = 2;
constexpr int kHeadDim = 8;
constexpr int kWidth = kHeads * kHeadDim;

// Unit roundoff of a cache type (half an ulp, relative).
double unit_roundoff(DType t) {
  switch (t) {
    case DType::F32: return std::ldexp(1.0, -24);
    case DType::F16: return std::ldexp(1.0, -11);
    case DType::BF16: return std::ldexp(1.0, -8);
    case DType::F8E4M3: return std::ldexp(1.0, -4);
    default: return std::ldexp(1.0, -3);
  }
}

void store(std::vector<uint8_t>& cache, DType t, int64_t i, double x, float scale) {
  const float f = static_cast<float>(x);
  switch (t) {
    case DType::F32: std::memcpy(cache.data() + i * 4, &f, 4); break;
    case DType::F16: { const uint16_t h = f32_to_f16(f); std::memcpy(cache.data() + i * 2, &h, 2); break; }
    case DType::BF16: { const uint16_t h = f32_to_bf16(f); std::memcpy(cache.data() + i * 2, &h, 2); break; }
    case DType::F8E4M3: cache[size_t(i)] = f32_to_fp8_e4m3(f / scale); break;
    default: cache[size_t(i)] = f32_to_fp8_e5m2(f / scale); break;
  }
}

double load(const std::vector<uint8_t>& cache, DType t, int64_t i, float scale) {
  switch (t) {
    case DType::F32: { float f; std::memcpy(&f, cache.data() + i * 4, 4); return f; }
    case DType::F16: { uint16_t h; std::memcpy(&h, cache.data() + i * 2, 2); return f16_to_f32(h); }
    case DType::BF16: { uint16_t h; std::memcpy(&h, cache.data() + i * 2, 2); return bf16_to_f32(h); }
    case DType::F8E4M3: return double(fp8_e4m3_to_f32(cache[size_t(i)])) * scale;
    default: return double(fp8_e5m2_to_f32(cache[size_t(i)])) * scale;
  }
}

// Head h of raw key `k` [kWidth] rotated to position p, in float64: Neox halves over rot dims.
std::vector<double> rotated(const std::vector<double>& k, int rot, double theta, double p) {
  std::vector<double> out = k;
  const int half = rot / 2;
  for (int h = 0; h < kHeads; ++h) {
    for (int j = 0; j < half; ++j) {
      const double a = p * std::pow(theta, -2.0 * j / rot);
      const double x1 = k[size_t(h * kHeadDim + j)], x2 = k[size_t(h * kHeadDim + j + half)];
      out[size_t(h * kHeadDim + j)] = x1 * std::cos(a) - x2 * std::sin(a);
      out[size_t(h * kHeadDim + j + half)] = x2 * std::cos(a) + x1 * std::sin(a);
    }
  }
  return out;
}

struct Move {
  int64_t src, dst;
  int old_pos, new_pos;
};

// Fills every slot s with raw key raw[s] rotated to position pos[s] and a value, runs the moves and
// checks each destination against raw[src] rotated to new_pos, within 3 u |pair| (one rounding when
// cached, the rotation of two rounded inputs, one rounding when stored) plus fp8's subnormal spacing.
void check_moves(DType t, int rot, const std::vector<Move>& moves, int num_slots, std::vector<int> pos) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " rot " + std::to_string(rot));
  const double theta = 100.0;
  const float scale = (t == DType::F8E4M3 || t == DType::F8E5M2) ? 0.05f : 1.0f;
  const size_t elem = dtype_size(t);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<std::vector<double>> raw(static_cast<size_t>(num_slots), std::vector<double>(kWidth));
  std::vector<uint8_t> kc(size_t(num_slots) * kWidth * elem), vc(kc.size());
  for (int s = 0; s < num_slots; ++s) {
    for (auto& x : raw[size_t(s)]) x = u(rng);
    const std::vector<double> k = rotated(raw[size_t(s)], rot, theta, pos[size_t(s)]);
    for (int e = 0; e < kWidth; ++e) {
      store(kc, t, int64_t(s) * kWidth + e, k[size_t(e)], scale);
      store(vc, t, int64_t(s) * kWidth + e, u(rng), scale);
    }
  }
  const std::vector<uint8_t> v_before = vc;
  std::vector<int64_t> src_dst;
  std::vector<float> cos_sin;
  for (const Move& m : moves) {
    src_dst.push_back(m.src);
    src_dst.push_back(m.dst);
    std::vector<float> row(static_cast<size_t>(rot));
    for (int j = 0; j < rot / 2; ++j) {
      const double a = (m.new_pos - m.old_pos) * std::pow(theta, -2.0 * j / rot);
      row[size_t(j)] = static_cast<float>(std::cos(a));
      row[size_t(rot / 2 + j)] = static_cast<float>(std::sin(a));
    }
    cos_sin.insert(cos_sin.end(), row.begin(), row.end());
  }
  move_kv_slots_cpu(kc.data(), vc.data(), num_slots, t, kHeads, kHeadDim, rot, src_dst.data(),
                    int64_t(moves.size()), rot > 0 ? cos_sin.data() : nullptr, scale);
  const double ur = unit_roundoff(t);
  const double floor = (t == DType::F8E4M3 ? std::ldexp(1.0, -9) : t == DType::F8E5M2 ? std::ldexp(1.0, -16) : 0.0) *
                       scale * 4;
  for (const Move& m : moves) {
    const std::vector<double>& k = raw[size_t(m.src)];
    const std::vector<double> want = rotated(k, rot, theta, m.new_pos);
    for (int e = 0; e < kWidth; ++e) {
      const int h = e / kHeadDim, d = e % kHeadDim, half = rot / 2;
      double mag = std::abs(k[size_t(e)]);
      if (d < rot) {
        const int j = d < half ? d : d - half;
        mag = std::hypot(k[size_t(h * kHeadDim + j)], k[size_t(h * kHeadDim + j + half)]);
      }
      const double got = load(kc, t, m.dst * kWidth + e, scale);
      EXPECT_NEAR(got, want[size_t(e)], 3 * ur * mag + 1e-6 * mag + floor)
          << "move " << m.src << "->" << m.dst << " element " << e;
    }
    // Values move as bytes.
    EXPECT_EQ(std::memcmp(vc.data() + m.dst * kWidth * elem, v_before.data() + m.src * kWidth * elem, kWidth * elem), 0);
  }
}

// A shift's moves: window slots [0, 24) at positions 0..23, keep 3, drop 6: token t + 6 moves into
// slot t for t in [3, 18) — sources and destinations overlap.
std::vector<Move> shift_moves(int keep, int drop, int n) {
  std::vector<Move> moves;
  for (int t = keep; t + drop < n; ++t) moves.push_back({t + drop, t, t + drop, t});
  return moves;
}

std::vector<int> identity_positions(int n) {
  std::vector<int> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[size_t(i)] = i;
  return p;
}

TEST(KvShift, RotatedKeysEqualAFreshRotationAtTheNewPosition) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
    for (int rot : {kHeadDim, kHeadDim / 2}) {  // full and partial rotary
      check_moves(t, rot, shift_moves(3, 6, 24), 24, identity_positions(24));
    }
  }
}

TEST(KvShift, LargePositionsAndMovesToOtherBlocks) {
  // Positions up to 4000 (angles of thousands of radians), moved by -1500 into unrelated slots.
  std::vector<int> pos(16);
  std::vector<Move> moves;
  for (int s = 0; s < 8; ++s) {
    pos[size_t(s)] = 2500 + 200 * s;
    moves.push_back({s, 15 - s, pos[size_t(s)], pos[size_t(s)] - 1500});
  }
  for (int s = 8; s < 16; ++s) pos[size_t(s)] = s;
  check_moves(DType::F32, kHeadDim, moves, 16, pos);
  check_moves(DType::BF16, kHeadDim / 2, moves, 16, pos);
}

TEST(KvShift, WithoutRotationKeysMoveUnchanged) {
  std::vector<float> kc(4 * kWidth), vc(4 * kWidth);
  for (size_t i = 0; i < kc.size(); ++i) {
    kc[i] = float(i);
    vc[i] = -float(i);
  }
  const int64_t sd[] = {3, 0, 0, 1};  // slot 3 -> 0 and the old slot 0 -> 1, sources read first
  move_kv_slots_cpu(kc.data(), vc.data(), 4, DType::F32, kHeads, kHeadDim, 0, sd, 2, nullptr, 1.0f);
  for (int e = 0; e < kWidth; ++e) {
    EXPECT_EQ(kc[size_t(e)], float(3 * kWidth + e));
    EXPECT_EQ(kc[size_t(kWidth + e)], float(e));
    EXPECT_EQ(vc[size_t(kWidth + e)], -float(e));
  }
}

TEST(KvShift, RefusesSlotsOutsideTheCacheAndBadShapes) {
  std::vector<float> kc(4 * kWidth), vc(4 * kWidth);
  const int64_t bad[] = {0, 4};
  EXPECT_THROW(move_kv_slots_cpu(kc.data(), vc.data(), 4, DType::F32, kHeads, kHeadDim, 0, bad, 1, nullptr, 1.0f),
               Error);
  const int64_t ok[] = {0, 1};
  std::vector<float> cs(kHeadDim + 2, 1.0f);
  EXPECT_THROW(move_kv_slots_cpu(kc.data(), vc.data(), 4, DType::F32, kHeads, kHeadDim, kHeadDim + 2, ok, 1, cs.data(),
                                 1.0f),
               Error);
  EXPECT_THROW(move_kv_slots_cpu(kc.data(), vc.data(), 4, DType::F8E4M3, kHeads, kHeadDim, 0, ok, 1, nullptr, 0.0f),
               Error);
}

}  // namespace
}  // namespace cypris
