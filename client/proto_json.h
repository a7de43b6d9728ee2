// `-o json`: a message as JSON a program can use as it is. Numbers are
// numbers (protobuf's JSON mapping writes 64-bit integers as strings),
// enums drop their type's prefix (JOB_STATE_SUCCEEDED -> "SUCCEEDED",
// FAILURE_CLASS_BAD_INPUT -> "BAD_INPUT"), timestamps are RFC 3339, and a
// field that does not apply is left out: empty strings and lists, unset
// messages and timestamps, UNSPECIFIED enums, and a job's eval loss before
// its first evaluation. Numbers and booleans are always present.
#pragma once

#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace sbp::cli {

nlohmann::json ProtoToJson(const google::protobuf::Message& message);

}  // namespace sbp::cli
