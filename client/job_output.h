// How the job verbs print jobs and workers: aligned tables and key/value
// details for people, protobuf JSON (snake_case field names, every field
// present) for scripts.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"
#include "streambp/v1/jobs.pb.h"

namespace sbp::cli {

// JOB_STATE_RUNNING -> "RUNNING".
std::string StateName(streambp::v1::JobState state);
// "running", "RUNNING" or "JOB_STATE_RUNNING" -> JOB_STATE_RUNNING.
absl::StatusOr<streambp::v1::JobState> ParseState(const std::string& text);
bool IsTerminal(streambp::v1::JobState state);

// Protobuf JSON of any message, e.g. a Job: {"id": ..., "state": "JOB_STATE_RUNNING",
// "progress": {"step": "12", ...}, ...} (int64 values are strings, as in proto3 JSON).
std::string ToJson(const google::protobuf::Message& message, bool pretty);

// "12s", "5m", "3h", "2d" since `time`; "-" when unset.
std::string Age(const google::protobuf::Timestamp& time);

std::string JobsTable(const streambp::v1::ListJobsResponse& jobs);
// Each job's spec under a "# ID (NAME)" line, for `sbp list --with-spec`.
std::string JobSpecs(const streambp::v1::ListJobsResponse& jobs);
std::string WorkersTable(const streambp::v1::ListWorkersResponse& workers);
std::string JobDetails(const streambp::v1::Job& job);
std::string EventsTable(const streambp::v1::JobEventsResponse& events);

}  // namespace sbp::cli
