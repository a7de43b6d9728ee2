// PNG encoding of a raster with libpng.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "client/plot/raster.h"

namespace sbp::plot {

// The PNG file bytes of `raster` (8-bit RGB).
absl::StatusOr<std::string> EncodePng(const Raster& raster);

}  // namespace sbp::plot
