// The CUDA implementation of DeviceKernels (core/device_kernels.h). Linking
// //core/cuda registers it for DeviceType::kCUDA at static initialisation,
// after which tensors on Device::CUDA(i) work with every op:
//
//   TPX_ASSIGN_OR_RETURN(Tensor x, host.To(Device::CUDA(0)));   // needs //core/cuda linked
//   TPX_ASSIGN_OR_RETURN(Tensor y, ops::Gelu(x));               // runs on GPU 0
//
// All work for device i is queued, in order, on its compute stream
// (current_stream.h); CopyToHost waits for it. Calls leave the caller's
// current device unchanged. GEMMs use one cuBLAS handle per (thread, device).
// Without a driver or GPU, CheckDevice (and so KernelsFor) fails with
// FailedPrecondition "no CUDA device visible (<reason>)"; nothing aborts.
#ifndef TPX_CORE_CUDA_CUDA_KERNELS_H_
#define TPX_CORE_CUDA_CUDA_KERNELS_H_

#include "core/device_kernels.h"

namespace tpx::cuda {

// The registered instance (for tests; code goes through KernelsFor).
DeviceKernels& CudaDeviceKernels();

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_CUDA_KERNELS_H_
