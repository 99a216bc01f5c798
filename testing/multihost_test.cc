// The UCX communicator across emulated hosts (testing/emulated_hosts.h):
// 2 hosts x 1-2 ranks. Ranks on different hosts talk TCP over the hosts'
// veth devices (UCX peer error handling), ranks on one host share memory.
// Skips where network namespaces cannot be created.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/comm_conformance.h"
#include "testing/emulated_hosts.h"
#include "testing/multiprocess.h"

namespace tpx::testing {
namespace {

using comm::ReduceOp;

constexpr int kHosts = 2;

// Established TCP connections of this network namespace whose remote end is
// `address` (dotted IPv4), from /proc/net/tcp (hex, little-endian address).
int ConnectionsTo(const std::string& address) {
  unsigned a, b, c, d;
  if (std::sscanf(address.c_str(), "%u.%u.%u.%u", &a, &b, &c, &d) != 4) return -1;
  const std::string want = absl::StrFormat("%02X%02X%02X%02X", d, c, b, a);
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  int n = 0;
  for (int lines = 0; lines < 100000 && std::getline(in, line); ++lines) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state == "01" && remote.substr(0, 8) == want) ++n;
  }
  return n;
}

class MultiHost : public ::testing::TestWithParam<int> {  // ranks per host
 protected:
  int world() const { return kHosts * GetParam(); }
};

// Each rank sees its host's hostname; ranks on host 0 hold TCP connections
// to host 1 (the store lives on host 0, so these are UCX's); all-reduce and
// all-gather give the serial reference.
TEST_P(MultiHost, RanksSeeTheirHostAndTalkTcp) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, kHosts);
  RunOptions options;
  hosts->PlaceRanks(GetParam(), &options);
  const int per_host = GetParam();
  const EmulatedHosts* h = hosts.get();
  RunOnRanks(world(), [h, per_host](RankContext& ctx) {
    const int host = ctx.rank / per_host;
    char name[256] = {};
    ASSERT_EQ(::gethostname(name, sizeof(name) - 1), 0);
    EXPECT_EQ(std::string(name), h->hostname(host));
    std::vector<float> x(1000);
    for (int i = 0; i < 1000; ++i) x[i] = ctx.rank * 1000 + i;
    ASSERT_TRUE(ctx.comm.AllReduce(x.data(), 1000, DType::kF32, ReduceOp::kSum).Wait().ok());
    for (int i = 0; i < 1000; ++i) {
      // sum over r of (1000 r + i)
      const float want = 1000.0f * ctx.size * (ctx.size - 1) / 2 + ctx.size * i;
      ASSERT_EQ(x[i], want) << "element " << i;
    }
    std::vector<int32_t> mine(3, ctx.rank), all(3 * ctx.size, -1);
    ASSERT_TRUE(ctx.comm.AllGather(mine.data(), all.data(), 3, DType::kI32).Wait().ok());
    for (int i = 0; i < 3 * ctx.size; ++i) EXPECT_EQ(all[i], i / 3);
    if (host == 0) {
      EXPECT_GE(ConnectionsTo(h->address(1)), 1) << "no TCP to host 1";
    }
    ASSERT_TRUE(ctx.comm.Barrier().Wait().ok());
  }, options);
}

TEST_P(MultiHost, AllReduceConformance) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, kHosts);
  RunOptions options;
  hosts->PlaceRanks(GetParam(), &options);
  RunOnRanks(world(), AllReduceConformance, options);
}

TEST_P(MultiHost, CollectivesConformance) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, kHosts);
  RunOptions options;
  hosts->PlaceRanks(GetParam(), &options);
  RunOnRanks(world(), [](RankContext& ctx) {
    AllGatherConformance(ctx);
    BroadcastConformance(ctx);
    SendRecvConformance(ctx);
    SplitConformance(ctx);
  }, options);
}

// A rank on host 1 is SIGKILLed: survivors on both hosts (host 0 through
// UCX's peer error handling, host 1 through its process watch) get an
// error naming it within the communicator timeout.
TEST_P(MultiHost, KilledRankOnOtherHostIsNamed) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, kHosts);
  RunOptions options;
  hosts->PlaceRanks(GetParam(), &options);
  options.comm_timeout = absl::Milliseconds(2000);
  options.deadline = absl::Seconds(40);
  options.kill_rank = world() - 1;
  options.kill_point = "all_reduce";
  const int victim = options.kill_rank;
  RunOnRanks(world(), [victim](RankContext& ctx) {
    float x[256] = {};
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(ctx.comm.AllReduce(x, 256, DType::kF32, ReduceOp::kSum).Wait().ok());
    }
    ctx.KillPoint("all_reduce");
    absl::Status s = ctx.comm.AllReduce(x, 256, DType::kF32, ReduceOp::kSum).Wait();
    std::fprintf(stderr, "rank %d sees: %s\n", ctx.rank, s.ToString().c_str());
    EXPECT_TRUE(s.code() == absl::StatusCode::kDeadlineExceeded ||
                s.code() == absl::StatusCode::kUnavailable ||
                s.code() == absl::StatusCode::kAborted)
        << s;
    EXPECT_NE(s.message().find("all_reduce #4"), std::string::npos) << s;
    EXPECT_NE(s.message().find(absl::StrCat("rank ", victim, " never entered it")),
              std::string::npos)
        << s;
  }, options);
}

// The same through UCX alone: with a communicator timeout far beyond how
// long UCX takes to see the killed peer's connection close, the error is
// UCX's (peer error handling on the cross-host endpoint), not the timeout.
TEST(MultiHostUcx, KilledPeerIsReportedByUcxPeerErrorHandling) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, kHosts);
  RunOptions options;
  hosts->PlaceRanks(1, &options);
  options.comm_timeout = absl::Seconds(10);
  options.deadline = absl::Seconds(60);
  options.kill_rank = 1;
  options.kill_point = "all_reduce";
  RunOnRanks(2, [](RankContext& ctx) {
    float x[256] = {};
    ASSERT_TRUE(ctx.comm.AllReduce(x, 256, DType::kF32, ReduceOp::kSum).Wait().ok());
    ctx.KillPoint("all_reduce");
    absl::Status s = ctx.comm.AllReduce(x, 256, DType::kF32, ReduceOp::kSum).Wait();
    std::fprintf(stderr, "rank %d sees: %s\n", ctx.rank, s.ToString().c_str());
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("peer unreachable: rank 1"), std::string::npos) << s;
  }, options);
}

// Host 1's link goes down (its bridge port): ranks on host 0 get an error
// naming a host-1 rank within the timeout instead of hanging. Rank 0 pulls
// the cable once every rank finished the earlier work, and plugs it back
// once every host-0 rank saw its error (ranks on host 1 may then finish or
// fail their call either way; neither is checked).
TEST_P(MultiHost, CutLinkIsAnErrorNotAHang) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, kHosts);
  RunOptions options;
  const int per_host = GetParam();
  hosts->PlaceRanks(per_host, &options);
  options.comm_timeout = absl::Milliseconds(2000);
  options.deadline = absl::Seconds(60);
  const EmulatedHosts* h = hosts.get();
  RunOnRanks(world(), [h, per_host](RankContext& ctx) {
    float x[256] = {};
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(ctx.comm.AllReduce(x, 256, DType::kF32, ReduceOp::kSum).Wait().ok());
    }
    // Counts up to `n` on key `key` (every rank adds 1 first if `add`).
    auto wait_count = [&](const std::string& key, int n) {
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      while (absl::Now() < give_up) {
        auto v = ctx.store.Add(key, 0);
        if (!v.ok() || *v >= n) return v.ok();
        absl::SleepFor(absl::Milliseconds(5));
      }
      return false;
    };
    ASSERT_TRUE(ctx.store.Add("cut/ready", 1).ok());
    const bool on_host0 = ctx.rank < per_host;
    if (ctx.rank == 0) {
      ASSERT_TRUE(wait_count("cut/ready", ctx.size));
      ASSERT_TRUE(h->SetLinkUp(1, false).ok());
      ASSERT_TRUE(ctx.store.Add("cut/done", 1).ok());
    }
    if (on_host0) {
      ASSERT_TRUE(wait_count("cut/done", 1));
    } else {
      // Enter the collective only without a cable, so that no data of it
      // reaches host 0 (its own /sys shows its own device).
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      std::string carrier = "1";
      while (carrier != "0" && absl::Now() < give_up) {
        std::ifstream in(absl::StrCat("/sys/class/net/", EmulatedHosts::kDevice, "/carrier"));
        std::getline(in, carrier);
        if (carrier != "0") absl::SleepFor(absl::Milliseconds(5));
      }
      ASSERT_EQ(carrier, "0") << "host 1's link never went down";
    }
    absl::Status s = ctx.comm.AllReduce(x, 256, DType::kF32, ReduceOp::kSum).Wait();
    std::fprintf(stderr, "rank %d sees: %s\n", ctx.rank, s.ToString().c_str());
    if (!on_host0) return;
    EXPECT_FALSE(s.ok());
    bool names_host1_rank = false;
    for (int r = per_host; r < ctx.size; ++r) {
      names_host1_rank |= s.message().find(absl::StrCat("rank ", r)) != std::string::npos;
    }
    EXPECT_TRUE(names_host1_rank) << s;
    ASSERT_TRUE(ctx.store.Add("cut/seen", 1).ok());
    if (ctx.rank == 0) {
      EXPECT_TRUE(wait_count("cut/seen", per_host));
      EXPECT_TRUE(h->SetLinkUp(1, true).ok());
    }
  }, options);
}

INSTANTIATE_TEST_SUITE_P(RanksPerHost, MultiHost, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(kHosts, "x", info.param);
                         });

}  // namespace
}  // namespace tpx::testing
