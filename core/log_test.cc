#include "core/log.h"

#include <string>

#include "gtest/gtest.h"

namespace tpx {
namespace {

TEST(LogTest, PrefixesRankWhenSet) {
  SetLogRank(-1);
  testing::internal::CaptureStderr();
  TPX_LOG(INFO) << "hello " << 42;
  std::string no_rank = testing::internal::GetCapturedStderr();
  EXPECT_EQ(no_rank.find("rank"), std::string::npos) << no_rank;
  EXPECT_NE(no_rank.find("log_test.cc"), std::string::npos) << no_rank;
  EXPECT_NE(no_rank.find("] hello 42\n"), std::string::npos) << no_rank;

  SetLogRank(3);
  testing::internal::CaptureStderr();
  TPX_LOG(WARNING) << "careful";
  std::string with_rank = testing::internal::GetCapturedStderr();
  EXPECT_EQ(with_rank.rfind("[W rank 3 ", 0), 0u) << with_rank;
  SetLogRank(-1);
}

TEST(LogTest, CheckPassesSilentlyAndDiesWithMessage) {
  int evaluated = 0;
  TPX_CHECK(++evaluated == 1) << "not printed";
  EXPECT_EQ(evaluated, 1);
  EXPECT_DEATH({ TPX_CHECK(1 + 1 == 3) << "math is " << "broken"; },
               "Check failed: 1 \\+ 1 == 3 math is broken");
}

}  // namespace
}  // namespace tpx
