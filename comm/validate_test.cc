#include "comm/validate.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpx::comm {
namespace {

absl::Status Check(CollectiveArgs a, int rank = 1, int size = 4) {
  NormalizeCollective(a, rank, size);
  return ValidateCollective(a, rank, size);
}

void ExpectInvalid(const absl::Status& s, const std::vector<std::string>& fragments) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& f : fragments) {
    EXPECT_NE(s.message().find(f), std::string::npos) << "missing '" << f << "' in: " << s;
  }
}

CollectiveArgs AllReduce(const void* send, void* recv, int64_t count) {
  CollectiveArgs a;
  a.kind = CollectiveKind::kAllReduce;
  a.name = "all_reduce";
  a.send = send;
  a.recv = recv;
  a.count = count;
  return a;
}

TEST(Validate, AcceptsValidAllReduceInPlaceAndOutOfPlace) {
  float x[4] = {}, y[4] = {};
  EXPECT_TRUE(Check(AllReduce(x, y, 4)).ok());
  EXPECT_TRUE(Check(AllReduce(x, x, 4)).ok());
  EXPECT_TRUE(Check(AllReduce(nullptr, nullptr, 0)).ok());
}

TEST(Validate, NegativeCountNamesOpArgumentAndRank) {
  float x[4] = {};
  ExpectInvalid(Check(AllReduce(x, x, -1), 2), {"all_reduce", "rank 2", "'count'", "-1"});
}

TEST(Validate, NullBuffer) {
  float x[4] = {};
  ExpectInvalid(Check(AllReduce(nullptr, x, 4)), {"all_reduce", "'send'", "null"});
  ExpectInvalid(Check(AllReduce(x, nullptr, 4)), {"'recv'", "null"});
}

TEST(Validate, PartialOverlapIsRejected) {
  float x[8];
  ExpectInvalid(Check(AllReduce(x, x + 1, 4)), {"overlap"});
}

TEST(Validate, BoolReductionAndIntegerAvgAreRejected) {
  bool b[4] = {};
  CollectiveArgs a = AllReduce(b, b, 4);
  a.dtype = DType::kBool;
  ExpectInvalid(Check(a), {"bool", "all_reduce"});
  int32_t i[4];
  a = AllReduce(i, i, 4);
  a.dtype = DType::kI32;
  a.op = ReduceOp::kAvg;
  ExpectInvalid(Check(a), {"avg", "i32"});
  a.op = static_cast<ReduceOp>(77);
  ExpectInvalid(Check(a), {"'op'", "77"});
  a.op = ReduceOp::kSum;
  a.dtype = static_cast<DType>(42);
  ExpectInvalid(Check(a), {"'dtype'", "42"});
}

TEST(Validate, BoolIsFineForDataMovement) {
  bool b[4] = {};
  CollectiveArgs a;
  a.kind = CollectiveKind::kBroadcast;
  a.name = "broadcast";
  a.dtype = DType::kBool;
  a.recv = b;
  a.count = 4;
  a.peer = 0;
  EXPECT_TRUE(Check(a).ok());
}

TEST(Validate, RootOutOfRange) {
  float x[4] = {};
  CollectiveArgs a;
  a.kind = CollectiveKind::kBroadcast;
  a.name = "broadcast";
  a.recv = x;
  a.count = 4;
  a.peer = 4;
  ExpectInvalid(Check(a), {"broadcast", "'root'", "4", "[0, 4)"});
  a.peer = -1;
  ExpectInvalid(Check(a), {"'root'", "-1"});
}

TEST(Validate, AllGatherVCountsAndDisplacements) {
  float send[3], recv[16];
  CollectiveArgs a;
  a.kind = CollectiveKind::kAllGatherV;
  a.name = "all_gather_v";
  a.send = send;
  a.recv = recv;
  a.recv_counts = {1, 3, 0, 2};
  EXPECT_TRUE(Check(a).ok());
  CollectiveArgs bad = a;
  bad.recv_counts = {1, 3, 0};
  ExpectInvalid(Check(bad), {"'recv_counts'", "3 entries", "(4)"});
  bad = a;
  bad.recv_counts = {1, 3, -2, 2};
  ExpectInvalid(Check(bad), {"'recv_counts[2]'", "-2"});
  bad = a;
  bad.recv_displs = {0, 1, 4, 3};  // ranks 1 ([1,4)) and 3 ([3,5)) overlap
  ExpectInvalid(Check(bad), {"overlap", "ranks 1 and 3"});
  bad = a;
  bad.recv_capacity = 5;
  ExpectInvalid(Check(bad), {"'recv'", "holds 5", "6 are needed"});
  // In place: this rank's block inside recv.
  bad = a;
  bad.send = recv + 1;
  EXPECT_TRUE(Check(bad).ok());
  bad.send = recv + 2;
  ExpectInvalid(Check(bad), {"in-place"});
}

TEST(Validate, GatherVRootMustAgreeWithItsOwnCount) {
  float send[2], recv[8];
  CollectiveArgs a;
  a.kind = CollectiveKind::kGatherV;
  a.name = "gather_v";
  a.send = send;
  a.recv = recv;
  a.count = 2;
  a.peer = 1;
  a.recv_counts = {1, 3, 0, 2};
  ExpectInvalid(Check(a), {"recv_counts[1] is 3", "send_count is 2"});
  a.recv_counts = {1, 2, 0, 2};
  EXPECT_TRUE(Check(a).ok());
  // Non-root ranks need no layout.
  a.peer = 0;
  a.recv_counts.clear();
  EXPECT_TRUE(Check(a).ok());
}

TEST(Validate, SendRecvPeer) {
  float x[2];
  CollectiveArgs a;
  a.kind = CollectiveKind::kSend;
  a.name = "send";
  a.send = x;
  a.count = 2;
  a.peer = 1;
  ExpectInvalid(Check(a, 1), {"send", "'peer'", "this rank"});
  a.peer = 9;
  ExpectInvalid(Check(a, 1), {"'peer'", "9"});
  a.peer = 0;
  a.tag = -3;
  ExpectInvalid(Check(a, 1), {"'tag'", "-3"});
}

TEST(Validate, AllToAllCannotRunInPlace) {
  float x[8];
  CollectiveArgs a;
  a.kind = CollectiveKind::kAllToAllV;
  a.name = "all_to_all";
  a.send = x;
  a.recv = x;
  a.send_counts = {2, 2, 2, 2};
  a.recv_counts = {2, 2, 2, 2};
  ExpectInvalid(Check(a), {"in place"});
}

TEST(Describe, NamesSizeDtypeAndSeq) {
  CollectiveArgs a = AllReduce(nullptr, nullptr, 4 << 20);
  EXPECT_EQ(DescribeCollective(a, 0, 1042), "all_reduce #1042 (16 MiB f32, sum)");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(12), "12 B");
}

// ---- Where the tensors of a Tensor-form call live. Devices are described,
// not allocated, so these run without a GPU. ----

const BackendMemory kUcx{"ucx", /*device_memory=*/false, /*device=*/-1};
const BackendMemory kNcclOnGpu0{"nccl", /*device_memory=*/true, /*device=*/0};

TEST(ValidateTensorDevices, HostBackendRejectsCudaTensorNamingOpTensorAndBackend) {
  absl::StatusOr<Device> d =
      ValidateTensorDevices("all_reduce", 0, 2, {{"input", Device::CUDA(0), "f32[4]"}}, kUcx);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.status().message(),
            "all_reduce on rank 0 of 2: ucx backend takes CPU tensors; input is cuda:0 f32[4]");
}

TEST(ValidateTensorDevices, HostBackendRejectsCudaOutputBesideCpuInput) {
  absl::StatusOr<Device> d = ValidateTensorDevices(
      "all_gather", 1, 4,
      {{"input", Device::CPU(), "f32[2]"}, {"output", Device::CUDA(1), "f32[8]"}}, kUcx);
  ASSERT_FALSE(d.ok());
  ExpectInvalid(d.status(), {"all_gather on rank 1 of 4", "ucx backend takes CPU tensors",
                             "output is cuda:1 f32[8]"});
}

TEST(ValidateTensorDevices, CpuTensorsGoToEveryBackend) {
  for (const BackendMemory& backend : {kUcx, kNcclOnGpu0}) {
    absl::StatusOr<Device> d = ValidateTensorDevices(
        "all_reduce", 0, 2,
        {{"input", Device::CPU(), "f32[4]"}, {"output", Device::CPU(), "f32[4]"}}, backend);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, Device::CPU()) << backend.backend;
  }
}

TEST(ValidateTensorDevices, DeviceBackendTakesTensorsOnItsDevice) {
  absl::StatusOr<Device> d = ValidateTensorDevices(
      "reduce_scatter", 0, 2,
      {{"input", Device::CUDA(0), "bf16[8]"}, {"output", Device::CUDA(0), "bf16[4]"}},
      kNcclOnGpu0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, Device::CUDA(0));
}

TEST(ValidateTensorDevices, MixedDevicesAreRejected) {
  absl::StatusOr<Device> d = ValidateTensorDevices(
      "all_reduce", 0, 2,
      {{"input", Device::CPU(), "f32[4]"}, {"output", Device::CUDA(0), "f32[4]"}}, kNcclOnGpu0);
  ASSERT_FALSE(d.ok());
  ExpectInvalid(d.status(), {"all_reduce on rank 0 of 2", "one device", "input is cpu f32[4]",
                             "output is cuda:0 f32[4]"});
  d = ValidateTensorDevices(
      "all_to_all", 0, 2,
      {{"input", Device::CUDA(0), "f32[4]"}, {"output", Device::CUDA(1), "f32[4]"}}, kNcclOnGpu0);
  ASSERT_FALSE(d.ok());
  ExpectInvalid(d.status(), {"one device", "input is cuda:0", "output is cuda:1"});
}

TEST(ValidateTensorDevices, CudaTensorOnAnotherDeviceThanTheCommunicatorsIsRejected) {
  absl::StatusOr<Device> d =
      ValidateTensorDevices("broadcast", 1, 2, {{"tensor", Device::CUDA(1), "i64[3]"}},
                            kNcclOnGpu0);
  ASSERT_FALSE(d.ok());
  ExpectInvalid(d.status(), {"broadcast on rank 1 of 2", "tensor is cuda:1 i64[3]",
                             "this communicator (nccl) uses cuda:0"});
}

TEST(ValidateTensorDevices, BackendPickedDeviceIsNotCheckedAgainst) {
  const BackendMemory picks_itself{"nccl", true, -1};
  absl::StatusOr<Device> d =
      ValidateTensorDevices("send", 0, 2, {{"tensor", Device::CUDA(3), "f32[1]"}}, picks_itself);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, Device::CUDA(3));
}

}  // namespace
}  // namespace tpx::comm
