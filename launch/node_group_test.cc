#include "launch/node_group.h"

#include <memory>
#include <thread>
#include <utility>

#include "absl/time/clock.h"
#include "comm/store/tcp_store.h"
#include "gtest/gtest.h"

namespace tpx::launch {
namespace {

class NodeGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = comm::TcpStoreServer::Listen("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->Start().ok());
  }

  std::unique_ptr<comm::Store> Client() {
    auto store = comm::TcpStore::Connect("127.0.0.1", server_->port(), absl::Seconds(10));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  NodeGroup::Options Fast() {
    NodeGroup::Options options;
    options.poll_interval = absl::Milliseconds(10);
    options.leave_wait = options.failed_leave_wait = absl::Seconds(30);
    return options;
  }

  // Two nodes of one job, joined (Join waits for every node).
  void JoinTwo(const NodeGroup::Options& options) {
    std::thread other([&] {
      auto g = NodeGroup::Join(Client(), 2, 1, absl::Seconds(30), options);
      ASSERT_TRUE(g.ok()) << g.status();
      node1_ = std::move(*g);
    });
    auto g = NodeGroup::Join(Client(), 2, 0, absl::Seconds(30), options);
    other.join();
    ASSERT_TRUE(g.ok()) << g.status();
    node0_ = std::move(*g);
    ASSERT_NE(node1_, nullptr);
  }

  // Asks `node` until it says to stop (bounded: the watcher polls every 10 ms).
  static std::optional<JobStop> AwaitStop(NodeGroup& node) {
    for (int i = 0; i < 3000; ++i) {
      if (auto why = node.StopRequest()) return why;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return std::nullopt;
  }

  std::unique_ptr<comm::TcpStoreServer> server_;
  std::unique_ptr<NodeGroup> node0_, node1_;
};

TEST_F(NodeGroupTest, AFailureOnOneNodeStopsTheOther) {
  JoinTwo(Fast());
  node0_->StartWatching();
  node1_->StartWatching();
  EXPECT_FALSE(node0_->StopRequest().has_value());
  const JobStop failure{3, "rank 3 exited with code 3"};
  node1_->ReportStop(failure);
  std::optional<JobStop> told = AwaitStop(*node0_);
  ASSERT_TRUE(told.has_value());
  EXPECT_EQ(told->exit_code, 3);
  EXPECT_EQ(told->reason, "the job failed on node 1: rank 3 exited with code 3");
  std::optional<JobStop> job1 = node1_->Leave(failure);
  ASSERT_TRUE(job1.has_value());
  EXPECT_EQ(job1->reason, "rank 3 exited with code 3");
  std::optional<JobStop> job0 = node0_->Leave(told);
  ASSERT_TRUE(job0.has_value());
  EXPECT_EQ(job0->exit_code, 3);
  EXPECT_EQ(job0->reason, told->reason);
}

TEST_F(NodeGroupTest, TheFirstFailureRecordedIsTheJobs) {
  JoinTwo(Fast());
  // Node 0's rank fails too, after node 1 recorded its failure: the job's
  // failure stays node 1's.
  node1_->ReportStop({3, "rank 3 exited with code 3"});
  EXPECT_TRUE(node1_->Leave(JobStop{3, "rank 3 exited with code 3"}).has_value());
  node0_->ReportStop({1, "rank 0 exited with code 1"});
  std::optional<JobStop> job = node0_->Leave(JobStop{1, "rank 0 exited with code 1"});
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->exit_code, 3);
  EXPECT_EQ(job->reason, "the job failed on node 1: rank 3 exited with code 3");
}

TEST_F(NodeGroupTest, ACleanFinishIsNotAFailure) {
  JoinTwo(Fast());
  node0_->StartWatching();
  node1_->StartWatching();
  // Node 1 finishes first; node 0, still running, is not told to stop.
  EXPECT_FALSE(node1_->Leave(std::nullopt).has_value());
  EXPECT_FALSE(node0_->StopRequest().has_value());
  EXPECT_FALSE(node0_->Leave(std::nullopt).has_value());
}

TEST_F(NodeGroupTest, NodeZeroLearnsOfALaterFailureWhenItLeaves) {
  JoinTwo(Fast());
  std::thread leave0([&] {
    std::optional<JobStop> job = node0_->Leave(std::nullopt);  // waits for node 1
    ASSERT_TRUE(job.has_value());
    EXPECT_EQ(job->exit_code, 137);
    EXPECT_EQ(job->reason, "the job failed on node 1: rank 2 was killed by signal 9 (Killed)");
  });
  const JobStop killed{137, "rank 2 was killed by signal 9 (Killed)"};
  node1_->ReportStop(killed);
  node1_->Leave(killed);
  leave0.join();
}

TEST_F(NodeGroupTest, ALostStoreStopsTheJob) {
  NodeGroup::Options options = Fast();
  options.store_loss_grace = absl::Milliseconds(100);
  JoinTwo(options);
  node1_->StartWatching();
  server_.reset();  // node 0's launcher and its store are gone
  std::optional<JobStop> told = AwaitStop(*node1_);
  ASSERT_TRUE(told.has_value());
  EXPECT_NE(told->exit_code, 0);
  EXPECT_NE(told->reason.find("the job's store has not answered for 100ms"), std::string::npos)
      << told->reason;
}

TEST_F(NodeGroupTest, NodesThatNeverJoinAreNamed) {
  auto g = NodeGroup::Join(Client(), 3, 0, absl::Milliseconds(200));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(g.status().message().find("node rank(s) 1, 2 of 3 never joined within 200ms"),
            std::string::npos)
      << g.status();
}

}  // namespace
}  // namespace tpx::launch
