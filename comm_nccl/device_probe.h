// Counts the CUDA devices this process could use, without initialising CUDA
// in the calling process: the query runs in a forked child. Tests use it to
// skip GPU cases (a parent that initialised CUDA would break CUDA in the rank
// processes it forks later), and it links no CUDA library (libcuda is
// dlopen'ed in the child).
//
//   std::string why;
//   if (VisibleCudaDevices(&why) < 2) GTEST_SKIP() << "no CUDA device visible: " << why;
#ifndef TPX_COMM_NCCL_DEVICE_PROBE_H_
#define TPX_COMM_NCCL_DEVICE_PROBE_H_

#include <string>

namespace tpx::nccl {

// Number of visible CUDA devices; 0 with `*why` set when there are none or
// the driver is missing. The first call probes and later calls return its
// answer, so make the first call before the process initialises CUDA.
int VisibleCudaDevices(std::string* why);

}  // namespace tpx::nccl

#endif  // TPX_COMM_NCCL_DEVICE_PROBE_H_
