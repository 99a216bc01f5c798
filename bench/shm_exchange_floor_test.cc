#include "bench/shm_exchange_floor.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpx::bench {
namespace {

// Rank r's send buffer: distinct small integers, so every sum is exact.
std::vector<float> SendOf(int rank, int64_t n, int round) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(1000 * rank + i + round);
  return v;
}

// Runs every op `rounds` times on `rank` and checks the results; "" or the
// first wrong value.
std::string RunRank(ShmExchangeFloor& floor, int rank, int world, int64_t n, int rounds) {
  const int64_t block = n / world;
  for (int round = 0; round < rounds; ++round) {
    std::vector<float> recv(n, -1.0f);
    const std::vector<float> send = SendOf(rank, n, round);
    if (std::string e = floor.Run(rank, "all_reduce", n * 4, send.data(), recv.data());
        !e.empty()) {
      return e;
    }
    for (int64_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += SendOf(r, n, round)[i];
      if (recv[i] != want) return "all_reduce[" + std::to_string(i) + "]";
    }
    // all_gather: rank r contributes its first `block` elements.
    if (std::string e = floor.Run(rank, "all_gather", n * 4, send.data(), recv.data());
        !e.empty()) {
      return e;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (recv[i] != SendOf(static_cast<int>(i / block), n, round)[i % block]) {
        return "all_gather[" + std::to_string(i) + "]";
      }
    }
    std::fill(recv.begin(), recv.end(), -1.0f);
    if (std::string e = floor.Run(rank, "reduce_scatter", n * 4, send.data(), recv.data());
        !e.empty()) {
      return e;
    }
    for (int64_t i = 0; i < block; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += SendOf(r, n, round)[rank * block + i];
      if (recv[i] != want) return "reduce_scatter[" + std::to_string(i) + "]";
    }
  }
  return floor.Barrier(rank);
}

class ShmExchangeFloorTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmExchangeFloorTest, EveryOpGivesTheRightResultOnEveryRank) {
  const int world = GetParam();
  const int64_t n = 16 * 3 * 4 * 5;  // divisible by every world size tested, odd vector tails
  auto floor = ShmExchangeFloor::Create(world, n * 4);
  ASSERT_TRUE(floor.ok()) << floor.status();
  ASSERT_TRUE((*floor)->Covers("all_reduce", n * 4));
  ASSERT_FALSE((*floor)->Covers("all_reduce", n * 4 + 4 * world));
  std::vector<pid_t> children;
  for (int rank = 1; rank < world; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string e = RunRank(**floor, rank, world, n, /*rounds=*/3);
      if (!e.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, e.c_str());
      _exit(e.empty() ? 0 : 1);
    }
    children.push_back(pid);
  }
  EXPECT_EQ(RunRank(**floor, 0, world, n, /*rounds=*/3), "");
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank failed: " << status;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShmExchangeFloorTest, ::testing::Values(1, 2, 3, 4));

TEST(ShmExchangeFloor, APeerThatNeverComesIsAnError) {
  auto floor = ShmExchangeFloor::Create(2, 4096, std::chrono::milliseconds(200));
  ASSERT_TRUE(floor.ok()) << floor.status();
  std::vector<float> send(1024, 1.0f), recv(1024);
  const std::string e = (*floor)->Run(0, "all_reduce", 4096, send.data(), recv.data());
  EXPECT_NE(e.find("rank 1 did not reach operation 1"), std::string::npos) << e;
}

TEST(ShmExchangeFloor, RejectsWhatItDoesNotCover) {
  EXPECT_FALSE(ShmExchangeFloor::Create(0, 4096).ok());
  auto floor = ShmExchangeFloor::Create(2, 4096);
  ASSERT_TRUE(floor.ok()) << floor.status();
  std::vector<float> buffer(2048);
  EXPECT_NE((*floor)->Run(0, "all_reduce", 8192, buffer.data(), buffer.data()), "");
  EXPECT_NE((*floor)->Run(0, "broadcast", 4096, buffer.data(), buffer.data()), "");
}

}  // namespace
}  // namespace tpx::bench
