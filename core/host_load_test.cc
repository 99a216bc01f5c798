#include "core/host_load.h"

#include <sched.h>

#include "gtest/gtest.h"

namespace tpx {
namespace {

TEST(HostLoadTest, ParsesProcNumbersAndStopsAfterThem) {
  const char* text = "12.5 3/141";
  const char* p = text;
  EXPECT_DOUBLE_EQ(ParseUnsignedDecimal(&p), 12.5);
  EXPECT_EQ(p, text + 4);
  ++p;
  EXPECT_DOUBLE_EQ(ParseUnsignedDecimal(&p), 3.0);
  EXPECT_EQ(*p, '/');
  const char* none = "x7";
  p = none;
  EXPECT_DOUBLE_EQ(ParseUnsignedDecimal(&p), 0.0);
  EXPECT_EQ(p, none);
}

// The CPUs are this process's (its affinity), and the calling thread is not
// counted among the runnable tasks.
TEST(HostLoadTest, ReadsTheCpusOfThisProcessAndTheOtherRunnableTasks) {
  HostLoadNow now;
  ASSERT_TRUE(ReadHostLoadNow(&now)) << "no /proc/loadavg";
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(now.cpus, CPU_COUNT(&set));
  EXPECT_GE(now.runnable, 0);
  EXPECT_GE(now.load_1min, 0.0);
}

}  // namespace
}  // namespace tpx
