// Which form the fused row kernels of core/cpu/nn_kernels.cc (bias + GeLU
// and layer norm, forward and backward) run in: AVX-512 intrinsics where
// the CPU has AVX-512 BF16, else the compiler's vectorisation of portable
// loops. Both forms give the same bits; the switch is there to test that
// and to compare their speed on one machine.
//
//   TPX_ROW_KERNELS_ISA=portable bazel-bin/bench/nn_kernels
#ifndef TPX_CORE_CPU_ROW_KERNELS_ISA_H_
#define TPX_CORE_CPU_ROW_KERNELS_ISA_H_

namespace tpx::cpu {

enum class RowKernelsIsa { kAvx512, kPortable };

// kAvx512 where the CPU has AVX-512 BF16, unless TPX_ROW_KERNELS_ISA
// (read once) is "portable".
RowKernelsIsa RowKernelsIsaInUse();

// For tests: the form the kernels run from now on (kAvx512 only where the
// CPU has AVX-512 BF16; elsewhere it stays kPortable).
void SetRowKernelsIsaForTesting(RowKernelsIsa isa);

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_ROW_KERNELS_ISA_H_
