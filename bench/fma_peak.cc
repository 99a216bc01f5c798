#include "bench/fma_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/amx_tile_config.h"
#include "core/cpu_features.h"

namespace tpx::bench {
namespace {

// Enough independent accumulators to cover the latency x pipes of every
// probed instruction: f32 FMAs need 8 (4 cycles x 2 pipes), but on Zen 5
// 12 chains of vdpbf16ps ran 7% below the rate that 16 and 20 both reach
// (505 against 540 GFLOP/s on one core), so a kernel could beat the "peak".
// 16 leaves the two operands' registers free in the 32 zmm.
constexpr int kChains = 16;
// Short rounds (~1 ms on a 3.5 GHz AVX-512 core), many of them: on a
// shared host a round that fits in one time slice measures the core alone.
constexpr int64_t kIterations = 300'000;
constexpr int kRounds = 60;
// Flops of one iteration of each chain (all kChains accumulators).
constexpr double kAvx2Flops = 2.0 * 8 * kChains;
constexpr double kAvx512Flops = 2.0 * 16 * kChains;
constexpr double kAvx512Bf16Flops = 4.0 * 16 * kChains;
// AMX: tdpbf16ps on 16 x 16 f32 tiles, 32 bf16 products per value, into
// kAmxChains accumulator tiles (enough to cover its latency; 8 tiles in all
// leave two for the operands). An iteration does ~100k flops, so a round
// runs fewer of them to stay about 1 ms long.
constexpr int kAmxChains = 6;
constexpr double kAmxBf16Flops = 2.0 * 16 * 16 * 32 * kAmxChains;
constexpr int64_t kAmxIterations = 20'000;

// Each kernel returns flops done; the sum of the accumulators is written to
// `sink` so the chain cannot be removed.
__attribute__((target("avx2,fma"))) double ChainAvx2(float* sink, int64_t iterations) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  *sink = out[0];
  return kAvx2Flops * static_cast<double>(iterations);
}

__attribute__((target("avx512f"))) double ChainAvx512(float* sink, int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  *sink = out[0];
  return kAvx512Flops * static_cast<double>(iterations);
}

// vdpbf16ps: per f32 lane, two bf16 products added to the accumulator
// (4 flops per lane per instruction).
__attribute__((target("avx512f,avx512bf16"))) double ChainAvx512Bf16(float* sink,
                                                                     int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(1e-7f));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  *sink = out[0];
  return kAvx512Bf16Flops * static_cast<double>(iterations);
}

__attribute__((target("amx-tile,amx-bf16"))) double ChainAmxBf16(float* sink, int64_t iterations) {
  // Tiles 0 to kAmxChains - 1 are the accumulators, then A and B.
  static const AmxTileConfig config = FullAmxTiles(kAmxChains + 2);
  _tile_loadconfig(&config);
  // Tile numbers are immediates: the accumulators below are spelled out.
  static_assert(kAmxChains == 6, "ChainAmxBf16 names tiles 0-5 as accumulators");
  alignas(64) uint16_t operand[16 * 32];
  for (uint16_t& v : operand) v = 0x3400;  // bf16 1.2e-7: the sums stay finite
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  alignas(64) float out[16 * 16];
  _tile_stored(5, out, 64);
  _tile_release();
  *sink = out[0];
  return kAmxBf16Flops * static_cast<double>(iterations);
}

// GFLOP/s of `threads` threads at once: each runs kRounds rounds of
// `chain` and keeps its best round; the result sums the threads' bests.
double BestGflops(double (*chain)(float*, int64_t), int threads, int64_t iterations = kIterations) {
  std::vector<double> best(static_cast<size_t>(threads), 0.0);
  std::vector<float> sinks(static_cast<size_t>(threads) * 16);  // one cache line each
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const auto start = std::chrono::steady_clock::now();
        const double flops = chain(&sinks[static_cast<size_t>(t) * 16], iterations);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        best[t] = std::max(best[t], flops / s / 1e9);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  double total = 0;
  for (double g : best) total += g;
  return total;
}

}  // namespace

FmaPeak MeasureFmaPeak(int threads) {
  threads = std::max(threads, 1);
  __builtin_cpu_init();
  FmaPeak p;
  p.f32_isa = "none";
  p.bf16_isa = "none";
  // Both are measured where AVX-512 exists: some cores (Zen 4) run 512-bit
  // FMAs at half rate, so the wider ISA is not always the faster one.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    p.f32_isa = "avx2";
    p.f32_gflops = BestGflops(&ChainAvx2, threads);
  }
  if (__builtin_cpu_supports("avx512f")) {
    const double g = BestGflops(&ChainAvx512, threads);
    if (g > p.f32_gflops) {
      p.f32_isa = "avx512";
      p.f32_gflops = g;
    }
    if (__builtin_cpu_supports("avx512bf16")) {
      p.bf16_isa = "avx512_bf16";
      p.avx512_bf16_gflops = BestGflops(&ChainAvx512Bf16, threads);
      p.bf16_gflops = p.avx512_bf16_gflops;
    }
  }
  if (CpuHasAmxBf16()) {
    const double g = BestGflops(&ChainAmxBf16, threads, kAmxIterations);
    if (g > p.bf16_gflops) {
      p.bf16_isa = "amx_bf16";
      p.bf16_gflops = g;
    }
  }
  return p;
}

double FmaChainRoundGflops(const FmaPeak& peak, int threads, bool bf16, double seconds) {
  double (*chain)(float*, int64_t) = nullptr;
  double flops_per_iteration = 0, peak_gflops = 0;
  if (bf16 && peak.bf16_isa == "amx_bf16") {
    chain = &ChainAmxBf16;
    flops_per_iteration = kAmxBf16Flops;
    peak_gflops = peak.bf16_gflops;
  } else if (bf16 && peak.bf16_isa == "avx512_bf16") {
    chain = &ChainAvx512Bf16;
    flops_per_iteration = kAvx512Bf16Flops;
    peak_gflops = peak.bf16_gflops;
  } else if (!bf16 && peak.f32_isa != "none") {
    chain = peak.f32_isa == "avx512" ? &ChainAvx512 : &ChainAvx2;
    flops_per_iteration = peak.f32_isa == "avx512" ? kAvx512Flops : kAvx2Flops;
    peak_gflops = peak.f32_gflops;
  }
  if (chain == nullptr) return 0;
  const double per_thread = peak_gflops * 1e9 / std::max(threads, 1);
  const int64_t iterations =
      std::max<int64_t>(1000, static_cast<int64_t>(seconds * per_thread / flops_per_iteration));
  alignas(64) float sink[16];
  const auto start = std::chrono::steady_clock::now();
  const double flops = chain(sink, iterations);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return flops / s / 1e9;
}

}  // namespace tpx::bench
