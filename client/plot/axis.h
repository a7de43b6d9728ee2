// Axis scales and tick positions: "nice" linear ticks (1, 2 or 5 times a
// power of ten) and decade ticks for a log scale, with their labels.
#pragma once

#include <string>
#include <vector>

namespace sbp::plot {

// Maps values in [lo, hi] to [0, 1], linearly or by log10.
struct AxisScale {
  double lo = 0;
  double hi = 1;
  bool log = false;
  double Fraction(double v) const;
};

struct Tick {
  double value = 0;
  std::string label;
};

// About `target` ticks inside [scale.lo, scale.hi] (never fewer than two
// unless the range is degenerate). `integers` keeps linear ticks on whole
// numbers (steps).
std::vector<Tick> Ticks(const AxisScale& scale, int target, bool integers = false);

// A short label for a value: "%.4g"-like, without a trailing ".0".
std::string FormatValue(double v);

}  // namespace sbp::plot
