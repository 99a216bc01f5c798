// What the CPU running this process supports, for kernels that pick their
// instruction set at run time (the build itself targets baseline x86-64),
// and the target attributes those kernels are compiled with. Each answer is
// read once and cached.
//
//   TPX_AVX512BF16_TARGET void Kernel(...);  // vdpbf16ps, vcvtne2ps2bf16, ...
//   if (CpuHasAvx512Bf16()) Kernel(...);
#ifndef TPX_CORE_CPU_FEATURES_H_
#define TPX_CORE_CPU_FEATURES_H_

#if defined(__x86_64__) && defined(__GNUC__)
// Functions using AVX-512 F only; callers check CpuHasAvx512F().
#define TPX_AVX512F_TARGET __attribute__((target("avx512f")))
// Functions using AVX-512 BF16 and the F, BW, DQ and VL extensions it comes
// with; callers check CpuHasAvx512Bf16().
#define TPX_AVX512BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#endif

namespace tpx {

// AVX-512 F. False off x86-64.
bool CpuHasAvx512F();

// Everything TPX_AVX512BF16_TARGET enables: AVX-512 F, BW, DQ, VL and
// BF16. False off x86-64.
bool CpuHasAvx512Bf16();

// AMX tiles with bf16 dot products (tdpbf16ps; Intel Xeon from Sapphire
// Rapids on), usable by this process: the kernel enables tile data only for
// processes that ask, so the first call asks for it (arch_prctl
// ARCH_REQ_XCOMP_PERM, process-wide); false where the CPU lacks AMX or the
// kernel refuses. False off x86-64 Linux.
bool CpuHasAmxBf16();

}  // namespace tpx

#endif  // TPX_CORE_CPU_FEATURES_H_
