// Reads a PNG back with libpng's own decoder (tests of `sbp plot`).
#pragma once

#include <png.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sbp::testing {

struct DecodedPng {
  bool ok = false;
  std::string error;
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // row-major RGBRGB...

  // The pixel at (x, y) as 0xRRGGBB.
  uint32_t At(int x, int y) const {
    const size_t i = (static_cast<size_t>(y) * width + x) * 3;
    return (uint32_t{rgb[i]} << 16) | (uint32_t{rgb[i + 1]} << 8) | rgb[i + 2];
  }
};

inline DecodedPng DecodePng(const std::string& bytes) {
  DecodedPng out;
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    out.error = image.message;
    return out;
  }
  image.format = PNG_FORMAT_RGB;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr)) {
    out.error = image.message;
    png_image_free(&image);
    return out;
  }
  out.ok = true;
  return out;
}

}  // namespace sbp::testing
