#include "worker/agent/failure.h"

#include <gtest/gtest.h>

namespace sbp {
namespace {

namespace v1 = streambp::v1;

TEST(ClassifyFailureTest, OutOfMemoryIsItsOwnClass) {
  EXPECT_EQ(ClassifyFailure(absl::ResourceExhaustedError("budget 1 GiB exceeded")),
            v1::FAILURE_CLASS_OUT_OF_MEMORY);
}

TEST(ClassifyFailureTest, InputProblemsAreBadInput) {
  EXPECT_EQ(ClassifyFailure(absl::InvalidArgumentError("train.lr")), v1::FAILURE_CLASS_BAD_INPUT);
  EXPECT_EQ(ClassifyFailure(absl::NotFoundError("data.jsonl")), v1::FAILURE_CLASS_BAD_INPUT);
  EXPECT_EQ(ClassifyFailure(absl::FailedPreconditionError("device: cuda")),
            v1::FAILURE_CLASS_BAD_INPUT);
  EXPECT_EQ(ClassifyFailure(absl::OutOfRangeError("token id")), v1::FAILURE_CLASS_BAD_INPUT);
}

TEST(ClassifyFailureTest, EverythingElseIsRetryableInternal) {
  EXPECT_EQ(ClassifyFailure(absl::InternalError("non-finite loss")), v1::FAILURE_CLASS_INTERNAL);
  EXPECT_EQ(ClassifyFailure(absl::UnavailableError("disk")), v1::FAILURE_CLASS_INTERNAL);
  EXPECT_EQ(ClassifyFailure(absl::UnknownError("?")), v1::FAILURE_CLASS_INTERNAL);
  EXPECT_EQ(ClassifyFailure(absl::DataLossError("checkpoint")), v1::FAILURE_CLASS_INTERNAL);
}

TEST(ClassifyFailureTest, OkHasNoClass) {
  EXPECT_EQ(ClassifyFailure(absl::OkStatus()), v1::FAILURE_CLASS_UNSPECIFIED);
}

}  // namespace
}  // namespace sbp
