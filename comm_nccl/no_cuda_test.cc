// Stands in for tests of code that exists only where a CUDA toolkit was found.
#include "gtest/gtest.h"

TEST(NoCudaToolkit, Skipped) {
  GTEST_SKIP() << "built without a CUDA toolkit: the NCCL backend is not compiled";
}
