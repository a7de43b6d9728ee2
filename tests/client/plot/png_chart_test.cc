// The PNG chart: it decodes with libpng at the size asked, and the line's
// pixels are where the data says.
#include "client/plot/png_chart.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "client/plot/png_file.h"
#include "tests/testing/png_read.h"

namespace sbp::plot {
namespace {

using ::sbp::testing::DecodedPng;
using ::sbp::testing::DecodePng;

uint32_t Packed(Rgb c) { return (uint32_t{c.r} << 16) | (uint32_t{c.g} << 8) | c.b; }

// A loss falling steadily from 5 to 0.5 over 200 steps, eval every 20 steps.
Chart Decreasing(bool with_eval) {
  Chart chart;
  chart.title = "tiny-sft-abc123";
  Panel panel;
  panel.main.name = "loss";
  panel.eval.name = "eval_loss";
  for (int step = 1; step <= 200; ++step) {
    const double loss = 5 - 4.5 * (step - 1) / 199.0;
    panel.main.points.push_back({double(step), loss});
    if (with_eval && step % 20 == 0) panel.eval.points.push_back({double(step), loss + 0.1});
  }
  chart.panels.push_back(panel);
  return chart;
}

DecodedPng Encoded(const PngChart& drawn) {
  absl::StatusOr<std::string> bytes = EncodePng(drawn.image);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->substr(1, 3), "PNG");
  return DecodePng(*bytes);
}

// Pixels of `color` in `r` (of the decoded image), leaving out `except`.
int CountIn(const DecodedPng& png, const Rect& r, Rgb color, const Rect& except = Rect{}) {
  int n = 0;
  for (int y = r.y0; y < r.y1; ++y) {
    for (int x = r.x0; x < r.x1; ++x) {
      if (!except.Contains(x, y) && png.At(x, y) == Packed(color)) ++n;
    }
  }
  return n;
}

// True when the 3x3 block around `p` holds a pixel of exactly `color`.
bool NearColor(const DecodedPng& png, PixelPoint p, Rgb color) {
  const int cx = static_cast<int>(std::floor(p.x)), cy = static_cast<int>(std::floor(p.y));
  for (int y = cy - 1; y <= cy + 1; ++y) {
    for (int x = cx - 1; x <= cx + 1; ++x) {
      if (png.At(x, y) == Packed(color)) return true;
    }
  }
  return false;
}

TEST(PngChartTest, DecodesAtTheSizeAsked) {
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{900, 540}, {320, 200}, {1601, 977}}) {
    absl::StatusOr<PngChart> drawn = DrawPngChart(Decreasing(true), w, h);
    ASSERT_TRUE(drawn.ok()) << drawn.status();
    const DecodedPng png = Encoded(*drawn);
    ASSERT_TRUE(png.ok) << png.error;
    EXPECT_EQ(png.width, w);
    EXPECT_EQ(png.height, h);
  }
}

TEST(PngChartTest, TheLineIsWhereTheDataSays) {
  const Chart chart = Decreasing(/*with_eval=*/false);
  absl::StatusOr<PngChart> drawn = DrawPngChart(chart, 800, 500);
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  const DecodedPng png = Encoded(*drawn);
  ASSERT_TRUE(png.ok) << png.error;
  const PanelLayout& layout = drawn->panels.at(0);

  // Every 10th point lies on the line's colour.
  for (size_t i = 0; i < chart.panels[0].main.points.size(); i += 10) {
    const Point& p = chart.panels[0].main.points[i];
    EXPECT_TRUE(NearColor(png, ToPixel(layout, p.step, p.value), kTrainColor)) << "step " << p.step;
  }
  // A falling curve: top-left and bottom-right quarters of the plot hold it,
  // the top-right and bottom-left ones do not (but for the legend's sample).
  const Rect& p = layout.plot;
  const int mx = (p.x0 + p.x1) / 2, my = (p.y0 + p.y1) / 2;
  EXPECT_GT(CountIn(png, Rect{p.x0, p.y0, mx, my}, kTrainColor), 50);
  EXPECT_GT(CountIn(png, Rect{mx, my, p.x1, p.y1}, kTrainColor), 50);
  EXPECT_EQ(CountIn(png, Rect{mx + 20, p.y0, p.x1, my - 20}, kTrainColor, layout.legend), 0);
  EXPECT_EQ(CountIn(png, Rect{p.x0, my + 20, mx - 20, p.y1}, kTrainColor, layout.legend), 0);
  // Nothing of the line outside the plot area but the legend.
  EXPECT_EQ(CountIn(png, Rect{0, 0, png.width, p.y0}, kTrainColor), 0);
  EXPECT_EQ(CountIn(png, Rect{0, 0, p.x0, png.height}, kTrainColor), 0);
  // No eval points, no eval colour.
  EXPECT_EQ(CountIn(png, Rect{0, 0, png.width, png.height}, kEvalColor), 0);
}

TEST(PngChartTest, EvalPointsGetTheirOwnColourWhereTheyAre) {
  const Chart chart = Decreasing(/*with_eval=*/true);
  absl::StatusOr<PngChart> drawn = DrawPngChart(chart, 800, 500);
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  const DecodedPng png = Encoded(*drawn);
  ASSERT_TRUE(png.ok) << png.error;
  EXPECT_GT(CountIn(png, Rect{0, 0, png.width, png.height}, kEvalColor), 100);
  for (const Point& p : chart.panels[0].eval.points) {
    EXPECT_TRUE(NearColor(png, ToPixel(drawn->panels[0], p.step, p.value), kEvalColor))
        << "step " << p.step;
  }
}

TEST(PngChartTest, OnePanelPerMetricAndALogScale) {
  Chart chart = Decreasing(true);
  Panel lr;
  lr.main.name = "lr";
  for (int step = 1; step <= 200; ++step) lr.main.points.push_back({double(step), 1e-4 * step});
  chart.panels.push_back(lr);
  chart.log_y = true;
  absl::StatusOr<PngChart> drawn = DrawPngChart(chart, 700, 600);
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  ASSERT_EQ(drawn->panels.size(), 2u);
  EXPECT_LE(drawn->panels[0].plot.y1, drawn->panels[1].plot.y0);
  EXPECT_TRUE(drawn->panels[1].y.log);
  const DecodedPng png = Encoded(*drawn);
  ASSERT_TRUE(png.ok) << png.error;
  // A rising lr on a log scale: the last point at the panel's top right.
  const PixelPoint last = ToPixel(drawn->panels[1], 200, 0.02);
  EXPECT_TRUE(NearColor(png, last, kTrainColor));
}

TEST(PngChartTest, ManyPointsDrawQuickly) {
  Chart chart;
  Panel panel;
  panel.main.name = "loss";
  for (int step = 1; step <= 300000; ++step) {
    panel.main.points.push_back({double(step), 1 + std::sin(step * 0.01) + 1.0 / step});
  }
  chart.panels.push_back(panel);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<PngChart> drawn = DrawPngChart(chart, 900, 540);
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(PngChartTest, RefusesSizesOutOfRange) {
  EXPECT_FALSE(DrawPngChart(Decreasing(false), 100, 400).ok());
  EXPECT_FALSE(DrawPngChart(Decreasing(false), 400, 50).ok());
  EXPECT_FALSE(DrawPngChart(Decreasing(false), 400, 100000).ok());
  Chart none;
  EXPECT_FALSE(DrawPngChart(none, 400, 400).ok());
}

}  // namespace
}  // namespace sbp::plot
