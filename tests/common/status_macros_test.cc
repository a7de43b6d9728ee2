#include "common/status_macros.h"

#include <gtest/gtest.h>

#include "common/check.h"

namespace sbp {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status EvenOnly(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagatesValuesAndErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarter(3).status().message(), "odd");
}

TEST(StatusMacros, ReturnIfError) {
  EXPECT_TRUE(EvenOnly(4).ok());
  EXPECT_FALSE(EvenOnly(5).ok());
}

TEST(StatusMacros, AnnotateKeepsCodeAndAddsContext) {
  absl::Status s = Annotate(absl::NotFoundError("no such file"), "reading config.json");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "reading config.json: no such file");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

TEST(CheckDeathTest, FailedCheckNamesTheConditionAndValues) {
  int a = 3, b = 4;
  EXPECT_DEATH(CHECK_EQ(a, b) << "extra", "CHECK failed: .*3 vs 4.*extra");
}

}  // namespace
}  // namespace sbp
