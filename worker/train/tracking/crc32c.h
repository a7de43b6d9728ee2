// CRC-32C (Castagnoli), the checksum of TensorBoard's record files. Debian
// ships no C++ library for it (abseil's absl/crc arrived after the packaged
// release), so it is the 256-entry table form of the reflected polynomial
// 0x82F63B78, a few lines.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace sbp {

uint32_t Crc32c(absl::string_view data);

// The masked form records store, so that a CRC over data that itself holds
// CRCs stays well distributed: rotate right by 15 bits, add 0xa282ead8.
uint32_t MaskedCrc32c(absl::string_view data);

}  // namespace sbp
