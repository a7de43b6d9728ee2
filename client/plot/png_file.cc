#include "client/plot/png_file.h"

#include <png.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sbp::plot {

absl::StatusOr<std::string> EncodePng(const Raster& raster) {
  if (raster.width() <= 0 || raster.height() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode an empty ", raster.width(), "x", raster.height(), " image"));
  }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(raster.width());
  image.height = static_cast<png_uint_32>(raster.height());
  image.format = PNG_FORMAT_RGB;
  const png_int_32 stride = static_cast<png_int_32>(PNG_IMAGE_ROW_STRIDE(image));
  // The first call, without a buffer, asks for the size the file needs.
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, /*convert_to_8bit=*/0,
                                 raster.pixels().data(), stride, nullptr)) {
    const std::string message = image.message;
    png_image_free(&image);
    return absl::InternalError(absl::StrCat("libpng: ", message));
  }
  std::string bytes(size, '\0');
  if (!png_image_write_to_memory(&image, bytes.data(), &size, 0, raster.pixels().data(), stride,
                                 nullptr)) {
    const std::string message = image.message;
    png_image_free(&image);
    return absl::InternalError(absl::StrCat("libpng: ", message));
  }
  bytes.resize(size);
  return bytes;
}

}  // namespace sbp::plot
