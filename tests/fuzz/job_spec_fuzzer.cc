// libFuzzer target for the job spec parsers: any text, read as YAML and as
// JSON, gives a spec or an InvalidArgument, never a crash, a hang or an
// escaping exception. An accepted spec survives a round trip through
// JobSpecToYaml and JobSpecToJson.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "worker/engine/engine.h"
#include "worker/train/job_spec.h"

namespace sbp {

// The fuzzer links the spec parser alone, not the engine; this is the one
// engine symbol it uses (worker/engine/engine.cc has the same spelling).
absl::string_view BackwardModeName(BackwardMode mode) {
  switch (mode) {
    case BackwardMode::kFull:
      return "full";
    case BackwardMode::kCheckpoint:
      return "checkpoint";
    case BackwardMode::kStream:
      return "stream";
  }
  return "?";
}

}  // namespace sbp

namespace {

void CheckRoundTrip(const sbp::JobSpec& spec) {
  auto from_yaml = sbp::ParseJobSpec(sbp::JobSpecToYaml(spec), "again.yaml");
  if (!from_yaml.ok() || !(*from_yaml == spec)) __builtin_trap();
  auto from_json = sbp::JobSpecFromJson(sbp::JobSpecToJson(spec), "again.json");
  if (!from_json.ok() || !(*from_json == spec)) __builtin_trap();
}

void CheckError(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto yaml = sbp::ParseJobSpec(text, "fuzz.yaml");
  if (yaml.ok()) {
    CheckRoundTrip(*yaml);
  } else {
    CheckError(yaml.status());
  }
  auto json = sbp::JobSpecFromJson(text, "fuzz.json");
  if (json.ok()) {
    CheckRoundTrip(*json);
  } else {
    CheckError(json.status());
  }
  return 0;
}
