#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace tpx {
namespace {

// The test binary links //core:omp_wait_policy, so unless the environment
// chose a policy, the default spin count was set before main.
TEST(OmpWaitPolicyTest, DefaultSpinCountIsSetBeforeMain) {
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) GTEST_SKIP() << "OMP_WAIT_POLICY set";
  ASSERT_NE(spin, nullptr);
  EXPECT_EQ(std::string(spin), "1000");
}

}  // namespace
}  // namespace tpx
