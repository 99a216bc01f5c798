#include "core/omp_wait_policy.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace tpx {
namespace {

TEST(OmpWaitPolicyTest, BusyHostSleepsAtOnceQuietHostSpinsBriefly) {
  EXPECT_STREQ(OmpWaitSettingFor({.load_1min = 0.3, .runnable = 0, .cpus = 2}),
               "GOMP_SPINCOUNT=10000");
  EXPECT_STREQ(OmpWaitSettingFor({.load_1min = 1.9, .runnable = 1, .cpus = 2}),
               "GOMP_SPINCOUNT=10000");
  // A busy average or a burst of runnable tasks now.
  EXPECT_STREQ(OmpWaitSettingFor({.load_1min = 2.0, .runnable = 0, .cpus = 2}),
               "OMP_WAIT_POLICY=PASSIVE");
  EXPECT_STREQ(OmpWaitSettingFor({.load_1min = 0.1, .runnable = 2, .cpus = 2}),
               "OMP_WAIT_POLICY=PASSIVE");
  EXPECT_STREQ(OmpWaitSettingFor({.load_1min = 7.0, .runnable = 3, .cpus = 16}),
               "GOMP_SPINCOUNT=10000");
  // A nonsensical CPU count counts as one CPU.
  EXPECT_STREQ(OmpWaitSettingFor({.load_1min = 1.0, .runnable = 0, .cpus = 0}),
               "OMP_WAIT_POLICY=PASSIVE");
}

TEST(OmpWaitPolicyTest, ReadsThisHostsLoad) {
  HostLoad load;
  ASSERT_TRUE(ReadHostLoad(&load));
  EXPECT_GE(load.load_1min, 0.0);
  EXPECT_GE(load.runnable, 0);
  EXPECT_GE(load.cpus, 1);
}

// The test binary links //core:omp_wait_policy, so unless the environment
// chose a policy, exactly one of the two settings was added before main.
TEST(OmpWaitPolicyTest, SettingIsChosenBeforeMain) {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const std::string p = policy ? policy : "", s = spin ? spin : "";
  if ((policy != nullptr && p != "PASSIVE") || (spin != nullptr && s != "10000") ||
      (policy != nullptr && spin != nullptr)) {
    GTEST_SKIP() << "the environment chose OMP_WAIT_POLICY=" << p << " GOMP_SPINCOUNT=" << s;
  }
  EXPECT_TRUE(p == "PASSIVE" || s == "10000");
}

}  // namespace
}  // namespace tpx
