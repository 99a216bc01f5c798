// Philox4x32-10: the counter-based random number generator of tpx.
//
// Every random number is a pure function of a 64-bit key (the seed) and a
// 128-bit counter, so any device can produce the same numbers from the same
// state without sequential generator state: a CUDA thread computes exactly the
// block it needs. tpx lays the counter out as
//   counter = {block_lo, block_hi, stream_lo, stream_hi}
// where `stream` is the generator's offset at the time of a draw (one stream
// per draw, see rng/generator.h) and `block` = element_index / 4: element i of
// a draw uses lane i % 4 of block i / 4. Hence the value for an element depends
// only on (seed, stream, element index), whatever the thread or shard layout.
//
//   uint64_t seed = 1234, stream = 0;
//   float u = tpx::rng::UniformAt(seed, stream, /*index=*/17);   // [0, 1)
//   float z = tpx::rng::NormalAt(seed, stream, 17);              // N(0, 1)
//   std::vector<float> w(n);
//   tpx::rng::FillNormal(w.data(), n, seed, stream, /*first_index=*/0, 0.f, 0.02f);
//
// Uniform values are bit-identical on every device (integer arithmetic plus an
// exact int->float scale). Normals use Box-Muller (logf/sinf/cosf) and agree
// across math libraries to within a few ulp.
#ifndef TPX_RNG_PHILOX_H_
#define TPX_RNG_PHILOX_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TPX_RNG_HOST_DEVICE __host__ __device__
#else
#define TPX_RNG_HOST_DEVICE
#endif

namespace tpx::rng {

struct Philox4x32 {
  uint32_t v[4];
};

// Multipliers and Weyl key increments of Philox4x32 (Salmon et al., SC'11).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

// One Philox4x32-10 block: 10 rounds of (counter, key) -> 4 random words.
TPX_RNG_HOST_DEVICE constexpr Philox4x32 Philox4x32_10(Philox4x32 ctr, uint32_t k0,
                                                       uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

// The 4 words of block `block` of stream `stream` under `seed`.
TPX_RNG_HOST_DEVICE constexpr Philox4x32 PhiloxBlock(uint64_t seed, uint64_t stream,
                                                     uint64_t block) {
  return Philox4x32_10(
      Philox4x32{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                  static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Top 24 bits as a float in [0, 1): exact, so identical on every device.
TPX_RNG_HOST_DEVICE constexpr float WordToUniform(uint32_t w) {
  return static_cast<float>(w >> 8) * (1.0f / 16777216.0f);
}
// Same bits mapped to (0, 1]: safe for log().
TPX_RNG_HOST_DEVICE constexpr float WordToUniformOpenZero(uint32_t w) {
  return static_cast<float>((w >> 8) + 1u) * (1.0f / 16777216.0f);
}

// Box-Muller on two words -> two N(0,1) values.
TPX_RNG_HOST_DEVICE inline void WordsToNormal(uint32_t a, uint32_t b, float* z0, float* z1) {
  const float r = sqrtf(-2.0f * logf(WordToUniformOpenZero(a)));
  const float theta = 6.2831853071795864769f * WordToUniform(b);
  *z0 = r * cosf(theta);
  *z1 = r * sinf(theta);
}

// The random word of element `index` of a draw.
TPX_RNG_HOST_DEVICE constexpr uint32_t WordAt(uint64_t seed, uint64_t stream, uint64_t index) {
  return PhiloxBlock(seed, stream, index / 4).v[index % 4];
}
TPX_RNG_HOST_DEVICE constexpr float UniformAt(uint64_t seed, uint64_t stream, uint64_t index) {
  return WordToUniform(WordAt(seed, stream, index));
}
// Normal of element `index`: lanes (0,1) and (2,3) of its block form Box-Muller pairs.
TPX_RNG_HOST_DEVICE inline float NormalAt(uint64_t seed, uint64_t stream, uint64_t index) {
  const Philox4x32 b = PhiloxBlock(seed, stream, index / 4);
  const int pair = static_cast<int>(index % 4) & ~1;
  float z0, z1;
  WordsToNormal(b.v[pair], b.v[pair + 1], &z0, &z1);
  return (index % 2 == 0) ? z0 : z1;
}

// Host bulk fills of out[j] = value of element (first_index + j), j in [0, n).
// Equivalent to calling UniformAt / NormalAt per element, one block per 4.
template <typename Fn>  // fn(uint64_t element_index, const Philox4x32& block, int lane)
inline void ForEachElementBlock(uint64_t seed, uint64_t stream, uint64_t first_index,
                                int64_t n, Fn&& fn) {
  uint64_t i = first_index;
  const uint64_t end = first_index + static_cast<uint64_t>(n);
  while (i < end) {
    const uint64_t block = i / 4;
    const Philox4x32 b = PhiloxBlock(seed, stream, block);
    for (int lane = static_cast<int>(i % 4); lane < 4 && i < end; ++lane, ++i) fn(i, b, lane);
  }
}

inline void FillUniform(float* out, int64_t n, uint64_t seed, uint64_t stream,
                        uint64_t first_index, float low = 0.f, float high = 1.f) {
  const float scale = high - low;
  ForEachElementBlock(seed, stream, first_index, n,
                      [&](uint64_t i, const Philox4x32& b, int lane) {
                        out[i - first_index] = low + scale * WordToUniform(b.v[lane]);
                      });
}

inline void FillNormal(float* out, int64_t n, uint64_t seed, uint64_t stream,
                       uint64_t first_index, float mean = 0.f, float stddev = 1.f) {
  uint64_t i = first_index;
  const uint64_t end = first_index + static_cast<uint64_t>(n);
  while (i < end) {
    const Philox4x32 b = PhiloxBlock(seed, stream, i / 4);
    float z[4];
    WordsToNormal(b.v[0], b.v[1], &z[0], &z[1]);
    WordsToNormal(b.v[2], b.v[3], &z[2], &z[3]);
    for (int lane = static_cast<int>(i % 4); lane < 4 && i < end; ++lane, ++i) {
      out[i - first_index] = mean + stddev * z[lane];
    }
  }
}

}  // namespace tpx::rng

#endif  // TPX_RNG_PHILOX_H_
