// Human byte sizes: "8GiB", "512MiB", "1.5 GB", "4096" (bytes) <-> int64.
// Binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones
// (KB, MB, GB, TB) powers of 1000; "B" or no suffix means bytes. Case of the
// suffix is ignored; a "K"/"M"/"G"/"T" alone is read as binary.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace sbp {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// Formats with the largest binary unit that keeps the value >= 1, one decimal:
// 9771876352 -> "9.1 GiB", 512 -> "512 B".
std::string FormatByteSize(int64_t bytes);

}  // namespace sbp
