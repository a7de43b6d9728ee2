// How a training run's error is reported to the coordinator: the failure
// class decides whether the job is retried.
#pragma once

#include "absl/status/status.h"
#include "streambp/v1/jobs.pb.h"

namespace sbp {

// A FailureKind on the status decides first: storage -> STORAGE (retried
// with backoff), diverged -> DIVERGED (not retried), a stale attempt ->
// LOST_WORKER. Then the code: ResourceExhausted -> OUT_OF_MEMORY (the
// allocator budget was exceeded; the same plan fails again), InvalidArgument / NotFound /
// FailedPrecondition / OutOfRange -> BAD_INPUT (spec, data or model; not retried), anything else ->
// INTERNAL (retryable). OK -> UNSPECIFIED.
streambp::v1::FailureClass ClassifyFailure(const absl::Status& status);

}  // namespace sbp
