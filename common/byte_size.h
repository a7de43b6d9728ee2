// Human byte sizes: "8GiB", "512MiB", "1.5 GB", "4096" (bytes) <-> int64.
// Binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones
// (KB, MB, GB, TB) powers of 1000; "B" or no suffix means bytes. Case of the
// suffix is ignored; a "K"/"M"/"G"/"T" alone is read as binary. Kubernetes'
// binary quantities (Ki, Mi, Gi, Ti: "72Gi") read as KiB, MiB, GiB, TiB;
// its decimal ones do not carry over (Kubernetes' "64G" is 64*10^9 bytes,
// here "64GB"; the Helm chart writes them so).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sbp {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// Formats with the largest binary unit that keeps the value >= 1, one decimal:
// 9771876352 -> "9.1 GiB", 512 -> "512 B".
std::string FormatByteSize(int64_t bytes);

}  // namespace sbp
