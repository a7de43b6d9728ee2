// <run>/tb/: TensorBoard event files of a run, written beside metrics.jsonl
// by the rank that writes it. Every numeric field of a metrics.jsonl line
// becomes a scalar of that name at that step (nested objects as "a/b").
//
// Each attempt writes a new file, events.out.tfevents.<unix seconds>.<host>.
// <pid>.<n>, so files are never rewritten. It starts with the file version and
// a session start at the first step the attempt trains: TensorBoard then
// drops the events an earlier attempt wrote at or after that step (a resumed
// run rewrites what came after its checkpoint), and the run reads as one
// curve. Records are TensorBoard's: the length (u64 little-endian), its
// masked CRC-32C, the serialized Event, its masked CRC-32C; a step's record
// is one append-mode write to an AppendFile, as metrics.jsonl's lines are.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "worker/train/tracking/append_file.h"

namespace sbp {

class TensorBoardLog {
 public:
  // Creates `dir` and a new event file in it for an attempt whose first step
  // is `first_step`. `wall_time`: seconds since the Unix epoch.
  static absl::StatusOr<TensorBoardLog> Open(const std::string& dir, int64_t first_step,
                                             double wall_time);

  // One event at `step` with a scalar for every number in `metrics`.
  absl::Status AppendScalars(int64_t step, double wall_time, const nlohmann::json& metrics);

  const std::string& path() const { return file_.path(); }

 private:
  explicit TensorBoardLog(AppendFile file) : file_(std::move(file)) {}
  AppendFile file_;
};

// The record framing of an event file, for one serialized Event.
std::string TensorBoardRecord(absl::string_view event);

}  // namespace sbp
