// Draws a Chart into an RGB raster: a title with the run's name, then one
// panel per metric with axes, numeric ticks, grid, the metric's line, its
// eval values as markers joined by a thinner line, and a legend in the
// corner the data leaves free. Encode the raster with EncodePng.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "client/plot/axis.h"
#include "client/plot/chart.h"
#include "client/plot/raster.h"

namespace sbp::plot {

inline constexpr Rgb kTrainColor{31, 119, 180};  // the metric's line
inline constexpr Rgb kEvalColor{230, 85, 13};    // eval markers and line

inline constexpr int kMinPngWidth = 200;
inline constexpr int kMinPngPanelHeight = 120;
inline constexpr int kMaxPngSide = 16384;

// Where a panel landed in the image: tests and callers map data to pixels.
struct PanelLayout {
  Rect plot;    // the data area
  Rect legend;  // the legend box, inside `plot`
  AxisScale x;  // steps
  AxisScale y;  // values
};

struct PngChart {
  Raster image;
  std::vector<PanelLayout> panels;
};

// InvalidArgument when the size is out of range: at least kMinPngWidth wide,
// kMinPngPanelHeight high per panel, at most kMaxPngSide either way.
absl::StatusOr<PngChart> DrawPngChart(const Chart& chart, int width, int height);

// The pixel coordinates of (step, value) in a panel (fractional; the pixel
// is their floor).
struct PixelPoint {
  double x = 0;
  double y = 0;
};
PixelPoint ToPixel(const PanelLayout& layout, double step, double value);

}  // namespace sbp::plot
