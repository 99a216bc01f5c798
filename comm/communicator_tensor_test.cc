// What the Tensor forms hand to a backend: the same CollectiveArgs as the
// raw-buffer forms, placed on the tensors' device. Runs on a recording
// Communicator, no backend and no GPU.
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "gtest/gtest.h"

namespace tpx::comm {
namespace {

class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(int rank, int size, bool device_memory)
      : rank_(rank), size_(size), device_memory_(device_memory) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::string& backend() const override { return backend_; }
  bool device_memory() const override { return device_memory_; }
  int device() const override { return device_memory_ ? rank_ : -1; }

  std::vector<CollectiveArgs> posted;

 protected:
  Work Post(const CollectiveArgs& args) override {
    posted.push_back(args);
    return Work();
  }
  absl::StatusOr<std::unique_ptr<Communicator>> SplitGrouped(int, int, std::vector<int32_t>, int,
                                                             std::string) override {
    return absl::UnimplementedError("not needed here");
  }

 private:
  int rank_, size_;
  bool device_memory_;
  std::string name_ = "world";
  std::string backend_ = "recording";
};

TEST(CommunicatorTensor, CpuTensorsPostHostArgsOnEveryKindOfBackend) {
  for (bool device_memory : {false, true}) {
    RecordingCommunicator comm(/*rank=*/1, /*size=*/2, device_memory);
    Tensor x = *Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    ASSERT_TRUE(comm.AllReduce(x, ReduceOp::kMax).Wait().ok());
    ASSERT_EQ(comm.posted.size(), 1u);
    const CollectiveArgs& a = comm.posted[0];
    EXPECT_EQ(a.kind, CollectiveKind::kAllReduce);
    EXPECT_EQ(a.op, ReduceOp::kMax);
    EXPECT_EQ(a.send, x.raw_data());
    EXPECT_EQ(a.recv, x.raw_data());
    EXPECT_EQ(a.count, 6);
    EXPECT_EQ(a.device, Device::CPU());
    EXPECT_EQ(a.stream, nullptr);
  }
}

TEST(CommunicatorTensor, TensorAndRawFormsPostTheSameLayout) {
  RecordingCommunicator comm(/*rank=*/1, /*size=*/3, /*device_memory=*/false);
  Tensor in = *Tensor::Zeros({2, 4});
  Tensor out = *Tensor::Zeros({6, 4});
  ASSERT_TRUE(comm.AllGather(in, out).Wait().ok());
  ASSERT_TRUE(comm.AllGather(in.raw_data(), out.raw_data(), 8, DType::kF32).Wait().ok());
  ASSERT_EQ(comm.posted.size(), 2u);
  for (const CollectiveArgs& a : comm.posted) {
    EXPECT_EQ(std::string(a.name), "all_gather");
    EXPECT_EQ(a.recv_counts, (PerRankCounts{8, 8, 8}));
    EXPECT_EQ(a.recv_displs, (PerRankCounts{0, 8, 16}));
    EXPECT_EQ(a.count, 8);  // this rank's own block, filled in by normalisation
    EXPECT_EQ(a.device, Device::CPU());
  }
}

TEST(CommunicatorTensor, RootOnlyTensorsAreNotReadOffTheRoot) {
  RecordingCommunicator comm(/*rank=*/0, /*size=*/2, /*device_memory=*/false);
  Tensor in = *Tensor::Zeros({1, 3});
  // Rank 0 is not the root: the (undefined) output is neither checked nor placed.
  ASSERT_TRUE(comm.Gather(in, Tensor(), /*root=*/1).Wait().ok());
  ASSERT_EQ(comm.posted.size(), 1u);
  EXPECT_EQ(comm.posted[0].recv, nullptr);
  EXPECT_EQ(comm.posted[0].device, Device::CPU());
}

TEST(CommunicatorTensor, ShapeErrorsNeverReachTheBackend) {
  RecordingCommunicator comm(/*rank=*/0, /*size=*/2, /*device_memory=*/true);
  absl::Status s = comm.AllGather(*Tensor::Zeros({2}), *Tensor::Zeros({3})).Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(comm.posted.empty());
}

}  // namespace
}  // namespace tpx::comm
