#include "client/plot/raster.h"

#include <algorithm>
#include <cmath>

namespace sbp::plot {

Raster::Raster(int width, int height, Rgb background)
    : width_(std::max(0, width)), height_(std::max(0, height)), clip_{0, 0, width_, height_} {
  pixels_.resize(static_cast<size_t>(width_) * height_ * 3);
  for (size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = background.r;
    pixels_[i + 1] = background.g;
    pixels_[i + 2] = background.b;
  }
}

Rgb Raster::At(int x, int y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return Rgb{};
  const size_t i = (static_cast<size_t>(y) * width_ + x) * 3;
  return Rgb{pixels_[i], pixels_[i + 1], pixels_[i + 2]};
}

void Raster::Blend(int x, int y, Rgb c, double alpha) {
  if (!clip_.Contains(x, y) || !(alpha > 0)) return;
  alpha = std::min(alpha, 1.0);
  const size_t i = (static_cast<size_t>(y) * width_ + x) * 3;
  const uint8_t src[3] = {c.r, c.g, c.b};
  for (int k = 0; k < 3; ++k) {
    const double mixed = pixels_[i + k] * (1 - alpha) + src[k] * alpha;
    pixels_[i + k] = static_cast<uint8_t>(std::lround(mixed));
  }
}

void Raster::FillRect(const Rect& r, Rgb c) {
  for (int y = std::max(r.y0, clip_.y0); y < std::min(r.y1, clip_.y1); ++y) {
    for (int x = std::max(r.x0, clip_.x0); x < std::min(r.x1, clip_.x1); ++x) Blend(x, y, c, 1);
  }
}

void Raster::DrawLine(double x0, double y0, double x1, double y1, double thickness, Rgb c) {
  const double half = thickness / 2;
  const int px0 = std::max(clip_.x0, static_cast<int>(std::floor(std::min(x0, x1) - half - 1)));
  const int px1 = std::min(clip_.x1 - 1, static_cast<int>(std::ceil(std::max(x0, x1) + half + 1)));
  const int py0 = std::max(clip_.y0, static_cast<int>(std::floor(std::min(y0, y1) - half - 1)));
  const int py1 = std::min(clip_.y1 - 1, static_cast<int>(std::ceil(std::max(y0, y1) + half + 1)));
  const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
  for (int y = py0; y <= py1; ++y) {
    for (int x = px0; x <= px1; ++x) {
      // Distance from the pixel's centre to the segment; the coverage falls
      // from 1 to 0 over the pixel's width around the edge.
      const double cx = x + 0.5, cy = y + 0.5;
      double t = len2 > 0 ? ((cx - x0) * dx + (cy - y0) * dy) / len2 : 0;
      t = std::clamp(t, 0.0, 1.0);
      const double d = std::hypot(cx - (x0 + t * dx), cy - (y0 + t * dy));
      Blend(x, y, c, std::clamp(half + 0.5 - d, 0.0, 1.0));
    }
  }
}

void Raster::FillDisc(double cx, double cy, double radius, Rgb c) {
  DrawLine(cx, cy, cx, cy, 2 * radius, c);
}

void Raster::SetClip(const Rect& clip) {
  clip_ = Rect{std::max(0, clip.x0), std::max(0, clip.y0), std::min(width_, clip.x1),
               std::min(height_, clip.y1)};
}

void Raster::ResetClip() { clip_ = Rect{0, 0, width_, height_}; }

}  // namespace sbp::plot
