// The core's measured floating-point peak: a short chain of independent
// FMAs (no memory traffic) timed on each of `threads` threads at once, with
// the widest vector ISA this CPU has, chosen at run time (AVX-512 or
// AVX2+FMA; bf16 with AVX512_BF16's vdpbf16ps or AMX's tdpbf16ps, whichever
// is present and faster). GEMM benchmarks report their throughput as a
// fraction of it.
//
//   FmaPeak p = MeasureFmaPeak(/*threads=*/1);
//   printf("%s f32 %.1f GFLOP/s\n", p.f32_isa.c_str(), p.f32_gflops);
#ifndef TPX_BENCH_FMA_PEAK_H_
#define TPX_BENCH_FMA_PEAK_H_

#include <string>

namespace tpx::bench {

struct FmaPeak {
  std::string f32_isa;      // "avx512", "avx2" or "none"
  double f32_gflops = 0;    // all threads together; 0 when no FMA ISA
  std::string bf16_isa;     // "amx_bf16", "avx512_bf16" or "none"
  double bf16_gflops = 0;   // bf16 products, f32 accumulation; 0 when unsupported
  // vdpbf16ps's rate, also where AMX is faster (on Sapphire Rapids it is
  // half the f32 FMA rate, AMX many times it); 0 without AVX512_BF16.
  double avx512_bf16_gflops = 0;
};

// `threads` threads run the chain at once; each keeps its best of many
// short rounds (a peak is a maximum, and the host may be shared) and the
// result is the sum of those bests.
FmaPeak MeasureFmaPeak(int threads);

// One round of `peak`'s f32 (or bf16) chain on the calling thread, sized to
// last about `seconds` at a `threads`-th of the peak; its GFLOP/s. The peak
// is the best of ~1 ms rounds, and on a shared host a core does not keep
// that rate for long: a computation of several milliseconds meets more of
// the host (on a shared Zen 5 VM, a dependent add chain's best 7 ms round
// ran 6% below its best 0.7 ms one). A benchmark of a long computation
// compares it with rounds as long as its own, run beside it (the sustained
// peak); 0 where `peak` has no such chain.
double FmaChainRoundGflops(const FmaPeak& peak, int threads, bool bf16, double seconds);

}  // namespace tpx::bench

#endif  // TPX_BENCH_FMA_PEAK_H_
