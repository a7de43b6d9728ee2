// Conversions between the plain records of the coordinator and the
// streambp.v1 messages. Unset times (the Unix epoch) become unset fields.
#pragma once

#include "absl/status/statusor.h"
#include "server/job_manager.h"
#include "server/records.h"
#include "streambp/v1/jobs.pb.h"
#include "streambp/v1/workers.pb.h"

namespace sbp::server {

void ToProto(const JobRecord& job, streambp::v1::Job* out);
void ToProto(const JobEventRecord& event, streambp::v1::JobEvent* out);
void ToProto(const WorkerView& worker, streambp::v1::Worker* out);
void ToProto(const AssignmentView& assignment, streambp::v1::Assignment* out);

ProgressRecord FromProto(const streambp::v1::JobProgress& progress);
MemoryUsageRecord FromProto(const streambp::v1::MemoryUsage& memory);
JobState FromProto(streambp::v1::JobState state);
FailureClass FromProto(streambp::v1::FailureClass failure);
Outcome FromProto(streambp::v1::Outcome outcome);

}  // namespace sbp::server
