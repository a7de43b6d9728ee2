#include "client/plot/png_chart.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/plot/bitmap_font.h"

namespace sbp::plot {
namespace {

constexpr Rgb kBackground{255, 255, 255};
constexpr Rgb kGrid{228, 228, 228};
constexpr Rgb kAxis{70, 70, 70};
constexpr Rgb kText{30, 30, 30};
constexpr Rgb kLegendBorder{190, 190, 190};

// Sizes that grow with the image: `s` is the size of one font pixel.
struct Metrics {
  int s;     // label scale
  int pad;   // outer spacing
  int tick;  // tick mark length
  int gap;   // between a tick and its label
  double line_width;
  double eval_width;
  double marker_radius;
};

Metrics MetricsFor(int width, int height, int panels) {
  // Text grows with the image, less with its height when panels share it.
  const double base = std::min(0.6 * width, height / std::sqrt(static_cast<double>(panels)));
  const int s = std::clamp(static_cast<int>(std::lround(base / 260)), 1, 4);
  return Metrics{s, 6 * s, 4 * s, 3 * s, 1.0 + s, 0.5 + 0.5 * s, 1.5 + 1.5 * s};
}

// `text` cut to `max_width` pixels at `scale`, ending in ".." when cut.
std::string Fit(std::string text, int max_width, int scale) {
  if (TextWidth(text, scale) <= max_width) return text;
  while (!text.empty() && TextWidth(text + "..", scale) > max_width) text.pop_back();
  return text + "..";
}

// The series in pixels; with far more points than pixel columns, each
// column keeps only its first, lowest, highest and last point, which draws
// the same picture.
std::vector<PixelPoint> PixelPath(const PanelLayout& layout, const Series& series) {
  std::vector<PixelPoint> all;
  all.reserve(series.points.size());
  for (const Point& p : series.points) all.push_back(ToPixel(layout, p.step, p.value));
  if (all.size() <= static_cast<size_t>(4 * std::max(1, layout.plot.width()))) return all;
  std::vector<PixelPoint> kept;
  size_t begin = 0;
  while (begin < all.size()) {
    const int column = static_cast<int>(std::floor(all[begin].x));
    size_t end = begin, low = begin, high = begin;
    while (end < all.size() && static_cast<int>(std::floor(all[end].x)) == column) {
      if (all[end].y > all[low].y) low = end;
      if (all[end].y < all[high].y) high = end;
      ++end;
    }
    size_t picks[] = {begin, std::min(low, high), std::max(low, high), end - 1};
    for (size_t i = 0; i < 4; ++i) {
      if (i == 0 || picks[i] != picks[i - 1]) kept.push_back(all[picks[i]]);
    }
    begin = end;
  }
  return kept;
}

void DrawPath(Raster& raster, const std::vector<PixelPoint>& path, double width, Rgb color) {
  if (path.size() == 1) raster.FillDisc(path[0].x, path[0].y, width, color);
  for (size_t i = 1; i < path.size(); ++i) {
    raster.DrawLine(path[i - 1].x, path[i - 1].y, path[i].x, path[i].y, width, color);
  }
}

// The scales of a panel: steps as they are, values with a little room above
// and below (a factor on a log scale).
void SetScales(const Chart& chart, const Panel& panel, PanelLayout* layout) {
  const Range steps = StepRange(panel);
  layout->x = AxisScale{steps.lo, steps.hi, false};
  const Range values = ValueRange(panel, chart.log_y);
  if (chart.log_y) {
    const double margin = std::pow(values.hi / values.lo, 0.05);
    layout->y = AxisScale{values.lo / margin, values.hi * margin, true};
  } else {
    const double margin = (values.hi - values.lo) * 0.05;
    layout->y = AxisScale{values.lo - margin, values.hi + margin, false};
  }
}

struct LegendEntry {
  std::string name;
  Rgb color;
  bool marker;
};

// The legend's size, placed in the plot corner covering the fewest points.
Rect PlaceLegend(const Metrics& m, const PanelLayout& layout, const Panel& panel,
                 const std::vector<LegendEntry>& entries) {
  int text_width = 0;
  for (const LegendEntry& e : entries) text_width = std::max(text_width, TextWidth(e.name, m.s));
  const int sample = 18 * m.s;
  const int w = m.pad + sample + m.pad + text_width + m.pad;
  const int row = TextHeight(m.s) + m.pad;
  const int h = static_cast<int>(entries.size()) * row + m.pad;
  const Rect& p = layout.plot;
  const int inset = m.pad;
  const Rect corners[] = {
      {p.x1 - inset - w, p.y0 + inset, p.x1 - inset, p.y0 + inset + h},  // top right
      {p.x0 + inset, p.y0 + inset, p.x0 + inset + w, p.y0 + inset + h},  // top left
      {p.x1 - inset - w, p.y1 - inset - h, p.x1 - inset, p.y1 - inset},  // bottom right
      {p.x0 + inset, p.y1 - inset - h, p.x0 + inset + w, p.y1 - inset},  // bottom left
  };
  Rect best = corners[0];
  size_t best_count = SIZE_MAX;
  for (const Rect& r : corners) {
    size_t count = 0;
    for (const Series* s : {&panel.main, &panel.eval}) {
      for (const PixelPoint& q : PixelPath(layout, *s)) {
        // Points within a few pixels of the box count too: a line close to
        // its edge still collides.
        const Rect grown{r.x0 - m.pad, r.y0 - m.pad, r.x1 + m.pad, r.y1 + m.pad};
        if (grown.Contains(static_cast<int>(q.x), static_cast<int>(q.y))) ++count;
      }
    }
    if (count < best_count) {
      best = r;
      best_count = count;
    }
  }
  return best;
}

void DrawLegend(Raster& raster, const Metrics& m, const Rect& box,
                const std::vector<LegendEntry>& entries) {
  raster.FillRect(box, kLegendBorder);
  raster.FillRect(Rect{box.x0 + 1, box.y0 + 1, box.x1 - 1, box.y1 - 1}, kBackground);
  const int sample = 18 * m.s;
  int y = box.y0 + m.pad;
  for (const LegendEntry& e : entries) {
    const double mid = y + TextHeight(m.s) / 2.0;
    const double x0 = box.x0 + m.pad, x1 = x0 + sample;
    raster.DrawLine(x0, mid, x1, mid, e.marker ? m.eval_width : m.line_width, e.color);
    if (e.marker) raster.FillDisc((x0 + x1) / 2, mid, m.marker_radius, e.color);
    DrawText(raster, static_cast<int>(x1) + m.pad, y, e.name, m.s, kText);
    y += TextHeight(m.s) + m.pad;
  }
}

// Grid, axes, ticks and their labels around layout.plot.
void DrawAxes(Raster& raster, const Metrics& m, const PanelLayout& layout,
              const std::vector<Tick>& x_ticks, const std::vector<Tick>& y_ticks) {
  const Rect& p = layout.plot;
  for (const Tick& t : y_ticks) {
    const int y = static_cast<int>(std::floor(ToPixel(layout, layout.x.lo, t.value).y));
    raster.FillRect(Rect{p.x0, y, p.x1, y + 1}, kGrid);
    raster.FillRect(Rect{p.x0 - m.s - m.tick, y, p.x0 - m.s, y + m.s}, kAxis);
    const int w = TextWidth(t.label, m.s);
    DrawText(raster, p.x0 - m.s - m.tick - m.gap - w, y - TextHeight(m.s) / 2, t.label, m.s, kText);
  }
  for (const Tick& t : x_ticks) {
    const int x = static_cast<int>(std::floor(ToPixel(layout, t.value, layout.y.lo).x));
    raster.FillRect(Rect{x, p.y0, x + 1, p.y1}, kGrid);
    raster.FillRect(Rect{x, p.y1 + m.s, x + m.s, p.y1 + m.s + m.tick}, kAxis);
    const int w = TextWidth(t.label, m.s);
    DrawText(raster, x - w / 2, p.y1 + m.s + m.tick + m.gap, t.label, m.s, kText);
  }
  raster.FillRect(Rect{p.x0 - m.s, p.y0, p.x0, p.y1 + m.s}, kAxis);
  raster.FillRect(Rect{p.x0 - m.s, p.y1, p.x1, p.y1 + m.s}, kAxis);
  const std::string x_name = "step";
  DrawText(raster, (p.x0 + p.x1 - TextWidth(x_name, m.s)) / 2,
           p.y1 + m.s + m.tick + m.gap + TextHeight(m.s) + m.gap, x_name, m.s, kText);
}

PanelLayout DrawPanel(Raster& raster, const Metrics& m, const Chart& chart, const Panel& panel,
                      const Rect& area) {
  PanelLayout layout;
  SetScales(chart, panel, &layout);
  const int bottom = m.s + m.tick + m.gap + TextHeight(m.s) + m.gap + TextHeight(m.s) + m.pad;
  const int plot_height = area.height() - m.pad - bottom;
  const int y_target = std::clamp(plot_height / (28 * m.s), 2, 8);
  const std::vector<Tick> y_ticks = Ticks(layout.y, y_target);
  int label_width = 0;
  for (const Tick& t : y_ticks) label_width = std::max(label_width, TextWidth(t.label, m.s));
  const int left = m.pad + label_width + m.gap + m.tick + m.s;
  layout.plot = Rect{area.x0 + left, area.y0 + m.pad, area.x1 - 2 * m.pad, area.y1 - bottom};

  // Enough room between x labels for the widest one.
  const int x_label =
      std::max(TextWidth(FormatValue(layout.x.lo), m.s), TextWidth(FormatValue(layout.x.hi), m.s));
  const int x_target = std::clamp(layout.plot.width() / (x_label + 24 * m.s), 2, 10);
  const std::vector<Tick> x_ticks = Ticks(layout.x, x_target, /*integers=*/true);
  DrawAxes(raster, m, layout, x_ticks, y_ticks);

  // The data, clipped to the plot area (and the axes' width around it).
  raster.SetClip(layout.plot);
  DrawPath(raster, PixelPath(layout, panel.main), m.line_width, kTrainColor);
  const std::vector<PixelPoint> eval = PixelPath(layout, panel.eval);
  DrawPath(raster, eval, m.eval_width, kEvalColor);
  for (const PixelPoint& q : eval) raster.FillDisc(q.x, q.y, m.marker_radius, kEvalColor);
  raster.ResetClip();

  std::vector<LegendEntry> entries = {{panel.main.name, kTrainColor, false}};
  if (!panel.eval.points.empty()) entries.push_back({panel.eval.name, kEvalColor, true});
  layout.legend = PlaceLegend(m, layout, panel, entries);
  DrawLegend(raster, m, layout.legend, entries);
  return layout;
}

}  // namespace

PixelPoint ToPixel(const PanelLayout& layout, double step, double value) {
  const Rect& p = layout.plot;
  return PixelPoint{p.x0 + 0.5 + layout.x.Fraction(step) * (p.width() - 1),
                    p.y1 - 0.5 - layout.y.Fraction(value) * (p.height() - 1)};
}

absl::StatusOr<PngChart> DrawPngChart(const Chart& chart, int width, int height) {
  const int panels = static_cast<int>(chart.panels.size());
  if (panels == 0) return absl::InvalidArgumentError("nothing to plot");
  if (width < kMinPngWidth || width > kMaxPngSide || height > kMaxPngSide ||
      height < kMinPngPanelHeight * panels) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", width, "x", height, " image is out of range for ", panels,
                     panels == 1 ? " metric" : " metrics", ": width ", kMinPngWidth, " to ",
                     kMaxPngSide, ", height ", kMinPngPanelHeight, " per metric to ", kMaxPngSide));
  }
  const Metrics m = MetricsFor(width, height, panels);
  PngChart out{Raster(width, height, kBackground), {}};

  const int title_scale = m.s + 1;
  const std::string title =
      Fit(chart.title.empty() ? "sbp plot" : chart.title, width - 2 * m.pad, title_scale);
  DrawText(out.image, (width - TextWidth(title, title_scale)) / 2, m.pad, title, title_scale,
           kText);
  const int top = m.pad + TextHeight(title_scale);
  const int panel_height = (height - top) / panels;
  for (int i = 0; i < panels; ++i) {
    const Rect area{0, top + i * panel_height, width, top + (i + 1) * panel_height};
    out.panels.push_back(DrawPanel(out.image, m, chart, chart.panels[i], area));
  }
  return out;
}

}  // namespace sbp::plot
