// Bearer tokens as every binary reads them (`--token-file`, $SBP_TOKEN, the
// coordinator's token files): one token of visible ASCII (0x21-0x7e), with
// surrounding whitespace (a trailing newline) removed, of at most
// kMaxBearerTokenBytes. Anything else (two lines, as a file holds during a
// rotation done by hand; a control byte; nothing) is an error that names the
// file or variable and what is wrong, and never prints the token: gRPC would
// abort the process on such a metadata value, and the message lands in logs.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sbp {

inline constexpr size_t kMaxBearerTokenBytes = 4096;

// The token in `text`; `source` names where it came from ("token file
// /path", "$SBP_TOKEN") in the error.
absl::StatusOr<std::string> ParseBearerToken(absl::string_view text, absl::string_view source);

// The token in the file at `path` (InvalidArgument when it cannot be read).
absl::StatusOr<std::string> ReadBearerTokenFile(const std::string& path);

}  // namespace sbp
