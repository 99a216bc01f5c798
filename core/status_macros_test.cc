#include "core/status_macros.h"

#include "gtest/gtest.h"

namespace tpx {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  TPX_ASSIGN_OR_RETURN(int h, Half(x));
  TPX_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckQuarter(int x) {
  TPX_RETURN_IF_ERROR(Quarter(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, PropagatesErrorsAndValues) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckQuarter(4).ok());
  EXPECT_EQ(CheckQuarter(2).message(), "odd");
}

}  // namespace
}  // namespace tpx
