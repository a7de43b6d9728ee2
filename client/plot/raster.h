// An RGB image in memory (8 bits a channel, rows top to bottom) and the
// shapes a chart is made of: rectangles, anti-aliased thick lines and discs,
// each blended with the coverage of the pixel and clipped to a rectangle.
#pragma once

#include <cstdint>
#include <vector>

namespace sbp::plot {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
};

// Pixel rectangle [x0, x1) x [y0, y1).
struct Rect {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int width() const { return x1 - x0; }
  int height() const { return y1 - y0; }
  bool Contains(int x, int y) const { return x >= x0 && x < x1 && y >= y0 && y < y1; }
};

class Raster {
 public:
  Raster(int width, int height, Rgb background);

  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }  // RGBRGB..., row-major
  Rgb At(int x, int y) const;

  // Mixes `c` into pixel (x, y) with weight `alpha` in [0, 1]; outside the
  // image or the clip rectangle it does nothing.
  void Blend(int x, int y, Rgb c, double alpha);
  void FillRect(const Rect& r, Rgb c);
  // A segment `thickness` pixels wide between points in pixel coordinates
  // (pixel (x, y) covers [x, x+1) x [y, y+1)), with round ends.
  void DrawLine(double x0, double y0, double x1, double y1, double thickness, Rgb c);
  void FillDisc(double cx, double cy, double radius, Rgb c);

  // Drawing is limited to `clip` (the whole image by default).
  void SetClip(const Rect& clip);
  void ResetClip();

 private:
  int width_, height_;
  Rect clip_;
  std::vector<uint8_t> pixels_;
};

}  // namespace sbp::plot
