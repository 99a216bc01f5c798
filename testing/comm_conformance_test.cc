// Runs the conformance suite for every backend and world size 1-4.
#include "testing/comm_conformance.h"

#include <string>
#include <tuple>

#include "comm_nccl/device_probe.h"
#include "gtest/gtest.h"

namespace tpx::testing {
namespace {

struct Setup {
  std::string backend;
  int world;
  // The backend takes CUDA tensors (DeviceTensors runs).
  bool device_tensors = false;
};

void PrintTo(const Setup& setup, std::ostream* os) {
  *os << setup.backend << ", world " << setup.world;
}

std::string SetupName(const ::testing::TestParamInfo<Setup>& info) {
  return info.param.backend + "_world" + std::to_string(info.param.world);
}

class Conformance : public ::testing::TestWithParam<Setup> {
 protected:
  void Run(void (*body)(RankContext&)) {
    if (GetParam().backend == "nccl") {
#ifndef TPX_HAVE_NCCL_PLUGIN
      GTEST_SKIP() << "no CUDA device visible: built without a CUDA toolkit (no NCCL plugin)";
#endif
      // Probed in a child process: CUDA must stay uninitialised before the fork.
      std::string why;
      const int devices = nccl::VisibleCudaDevices(&why);
      if (devices == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
      if (devices < GetParam().world) {
        GTEST_SKIP() << "nccl world " << GetParam().world << " needs one GPU per rank; "
                     << devices << " visible";
      }
    }
    RunOptions options;
    options.backend = GetParam().backend;
    options.comm_timeout = absl::Seconds(30);
    RunOnRanks(GetParam().world, body, options);
  }
};

TEST_P(Conformance, AllReduce) { Run(AllReduceConformance); }
TEST_P(Conformance, Broadcast) { Run(BroadcastConformance); }
TEST_P(Conformance, Reduce) { Run(ReduceConformance); }
TEST_P(Conformance, AllGather) { Run(AllGatherConformance); }
TEST_P(Conformance, ReduceScatter) { Run(ReduceScatterConformance); }
TEST_P(Conformance, GatherScatter) { Run(GatherScatterConformance); }
TEST_P(Conformance, AllToAll) { Run(AllToAllConformance); }
TEST_P(Conformance, SendRecv) { Run(SendRecvConformance); }
TEST_P(Conformance, Barrier) { Run(BarrierConformance); }
TEST_P(Conformance, Split) { Run(SplitConformance); }
TEST_P(Conformance, BackToBack) { Run(BackToBackConformance); }
TEST_P(Conformance, LargeAllReduce) { Run(LargeAllReduceConformance); }
TEST_P(Conformance, Tensor) { Run(TensorConformance); }
TEST_P(Conformance, Work) { Run(WorkConformance); }
TEST_P(Conformance, InvalidArguments) { Run(InvalidArgumentConformance); }
TEST_P(Conformance, DeviceTensors) {
  if (!GetParam().device_tensors) {
    GTEST_SKIP() << GetParam().backend << " is a host-memory backend (CPU tensors only)";
  }
  Run(DeviceTensorConformance);
}

INSTANTIATE_TEST_SUITE_P(Ucx, Conformance,
                         ::testing::Values(Setup{"ucx", 1}, Setup{"ucx", 2}, Setup{"ucx", 3},
                                           Setup{"ucx", 4}),
                         SetupName);

// One GPU per rank; skipped (with the reason) where fewer are visible.
INSTANTIATE_TEST_SUITE_P(Nccl, Conformance,
                         ::testing::Values(Setup{"nccl", 1, true}, Setup{"nccl", 2, true},
                                           Setup{"nccl", 4, true}),
                         SetupName);

}  // namespace
}  // namespace tpx::testing
