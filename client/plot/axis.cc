#include "client/plot/axis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sbp::plot {
namespace {

// The 1, 2 or 5 times a power of ten nearest to `raw` (by ratio).
double NiceStep(double raw) {
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double best = power;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (std::abs(std::log(m * power / raw)) < std::abs(std::log(best / raw))) best = m * power;
  }
  return best;
}

// A tick's label: as many decimals as the tick spacing `step`
// needs, or scientific notation for very large or small values.
std::string LinearLabel(double v, double step) {
  char buf[32];
  const double mag = std::max(std::abs(v), step);
  if (mag >= 1e6 || mag < 1e-4) {
    std::snprintf(buf, sizeof(buf), "%.2g", v);
  } else {
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v == 0 ? 0.0 : v);
  }
  return buf;
}

std::vector<Tick> LinearTicks(double lo, double hi, int target, bool integers) {
  std::vector<Tick> ticks;
  if (!(hi > lo)) return ticks;
  double step = NiceStep((hi - lo) / std::max(1, target));
  if (integers) step = std::max(step, 1.0);
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (double v = first; v <= hi + step * 1e-9; v += step) {
    const double snapped = std::abs(v) < step * 1e-9 ? 0 : v;
    ticks.push_back({snapped, LinearLabel(snapped, step)});
    if (ticks.size() > 100) break;
  }
  return ticks;
}

std::vector<Tick> LogTicks(double lo, double hi, int target) {
  const int first = static_cast<int>(std::floor(std::log10(lo)));
  const int last = static_cast<int>(std::ceil(std::log10(hi)));
  auto inside = [&](double v) { return v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9); };
  // 1, 2 and 5 times each power of ten when that gives few enough ticks...
  std::vector<Tick> fine, powers;
  for (int e = first; e <= last; ++e) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, e);
      if (!inside(v)) continue;
      fine.push_back({v, FormatValue(v)});
      if (m == 1) powers.push_back(fine.back());
    }
  }
  if (static_cast<int>(fine.size()) <= target + 1 || powers.size() < 2) return fine;
  // ...else every k-th power of ten.
  const size_t every = (powers.size() + target - 1) / std::max(1, target);
  std::vector<Tick> ticks;
  for (size_t i = 0; i < powers.size(); i += std::max<size_t>(1, every)) ticks.push_back(powers[i]);
  return ticks;
}

}  // namespace

double AxisScale::Fraction(double v) const {
  if (log) {
    const double a = std::log10(lo), b = std::log10(hi);
    return b > a ? (std::log10(v) - a) / (b - a) : 0.5;
  }
  return hi > lo ? (v - lo) / (hi - lo) : 0.5;
}

std::vector<Tick> Ticks(const AxisScale& scale, int target, bool integers) {
  if (scale.log && scale.lo > 0) {
    std::vector<Tick> ticks = LogTicks(scale.lo, scale.hi, target);
    // A range within one decade may hold fewer than two of those.
    if (ticks.size() >= 2) return ticks;
  }
  return LinearTicks(scale.lo, scale.hi, target, integers);
}

std::string FormatValue(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

}  // namespace sbp::plot
