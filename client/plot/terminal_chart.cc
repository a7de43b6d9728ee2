#include "client/plot/terminal_chart.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/plot/axis.h"

namespace sbp::plot {
namespace {

constexpr int kMinColumns = 24;
constexpr char kEvalMark[] = "\u2022";  // •
constexpr char kBlue[] = "\x1b[34m";
constexpr char kOrange[] = "\x1b[33m";
constexpr char kReset[] = "\x1b[0m";

// A grid of braille dots: cell (c, r) holds dots (2c..2c+1, 4r..4r+3).
class DotGrid {
 public:
  DotGrid(int cols, int rows) : cols_(cols), rows_(rows), bits_(cols * rows, 0) {}
  int width() const { return 2 * cols_; }
  int height() const { return 4 * rows_; }

  void Set(int x, int y) {
    if (x < 0 || y < 0 || x >= width() || y >= height()) return;
    // Unicode's braille dot numbering: dots 1-3 and 7 down the left column,
    // 4-6 and 8 down the right one.
    static constexpr uint8_t kLeft[4] = {0x01, 0x02, 0x04, 0x40};
    static constexpr uint8_t kRight[4] = {0x08, 0x10, 0x20, 0x80};
    bits_[(y / 4) * cols_ + x / 2] |= (x % 2 == 0 ? kLeft : kRight)[y % 4];
  }

  // A straight run of dots from one to the other (Bresenham).
  void Line(int x0, int y0, int x1, int y1) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    while (true) {
      Set(x0, y0);
      if (x0 == x1 && y0 == y1) return;
      const int e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x0 += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y0 += sy;
      }
    }
  }

  uint8_t Cell(int col, int row) const { return bits_[row * cols_ + col]; }

 private:
  int cols_, rows_;
  std::vector<uint8_t> bits_;
};

// The UTF-8 encoding of braille pattern `bits` (U+2800 + bits).
std::string Braille(uint8_t bits) {
  const int cp = 0x2800 + bits;
  std::string s;
  s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
  s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
  s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  return s;
}

// `line` cut to `columns` characters.
std::string Truncate(const std::string& line, int columns) {
  std::string out;
  int width = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const bool starts_char = (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
    if (starts_char && ++width > columns) break;
    out.push_back(line[i]);
  }
  return out;
}

std::string PadLeft(const std::string& s, int width) {
  return std::string(std::max(0, width - DisplayWidth(s)), ' ') + s;
}

// Steps are whole numbers, printed in full.
std::string StepText(double step) {
  if (step == std::floor(step) && std::abs(step) < 1e15) return absl::StrCat(std::llround(step));
  return FormatValue(step);
}

void RenderPanel(const Chart& chart, const Panel& panel, const TerminalOptions& o,
                 std::string* out) {
  const int columns = std::max(o.columns, kMinColumns);
  const Range steps = StepRange(panel);
  const Range values = ValueRange(panel, chart.log_y);
  const AxisScale x{steps.lo, steps.hi, false};
  const AxisScale y{values.lo, values.hi, chart.log_y};

  // The header: whole parts, as many as fit.
  const Point& last = panel.main.points.back();
  std::vector<std::string> parts = {
      panel.main.name, chart.title,
      absl::StrCat("steps ", StepText(panel.main.points.front().step), "-", StepText(last.step)),
      absl::StrCat("last ", FormatValue(last.value))};
  if (!panel.eval.points.empty()) {
    const Point& e = panel.eval.points.back();
    parts.push_back(absl::StrCat(kEvalMark, " ", panel.eval.name, " ", FormatValue(e.value), " at ",
                                 StepText(e.step)));
  }
  if (chart.log_y) parts.push_back("(log)");
  std::string header = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    if (DisplayWidth(header) + 2 + DisplayWidth(parts[i]) > columns) break;
    absl::StrAppend(&header, "  ", parts[i]);
  }
  absl::StrAppend(out, Truncate(header, columns), "\n");

  // Left: the max label on the top row, the min label on the bottom one.
  const std::string top = FormatValue(values.hi), bottom = FormatValue(values.lo);
  const int label = std::max(DisplayWidth(top), DisplayWidth(bottom));
  const int cols = columns - label - 2;
  const int rows = std::max(2, o.rows);
  DotGrid grid(cols, rows);
  auto dot = [&](const Point& p) {
    const int dx = static_cast<int>(std::lround(x.Fraction(p.step) * (grid.width() - 1)));
    const int dy = static_cast<int>(std::lround((1 - y.Fraction(p.value)) * (grid.height() - 1)));
    return std::pair<int, int>(dx, dy);
  };
  for (size_t i = 0; i < panel.main.points.size(); ++i) {
    const auto [x1, y1] = dot(panel.main.points[i]);
    if (i == 0) {
      grid.Set(x1, y1);
    } else {
      const auto [x0, y0] = dot(panel.main.points[i - 1]);
      grid.Line(x0, y0, x1, y1);
    }
  }
  std::vector<bool> eval_cell(cols * rows, false);
  for (const Point& p : panel.eval.points) {
    const auto [dx, dy] = dot(p);
    eval_cell[(dy / 4) * cols + dx / 2] = true;
  }

  for (int r = 0; r < rows; ++r) {
    const std::string name = r == 0 ? top : r == rows - 1 ? bottom : "";
    std::string line = absl::StrCat(PadLeft(name, label), name.empty() ? " \u2502" : " \u2524");
    for (int c = 0; c < cols; ++c) {
      if (eval_cell[r * cols + c]) {
        absl::StrAppend(&line, o.color ? kOrange : "", kEvalMark, o.color ? kReset : "");
      } else if (grid.Cell(c, r) != 0) {
        absl::StrAppend(&line, o.color ? kBlue : "", Braille(grid.Cell(c, r)),
                        o.color ? kReset : "");
      } else {
        line.push_back(' ');
      }
    }
    // Trailing blanks carry nothing.
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(out, line, "\n");
  }
  std::string axis = absl::StrCat(std::string(label + 1, ' '), "\u2514");
  for (int c = 0; c < cols; ++c) axis += "\u2500";
  absl::StrAppend(out, axis, "\n");
  const std::string first_step = StepText(steps.lo), last_step = StepText(steps.hi);
  const int room = cols - DisplayWidth(first_step);
  absl::StrAppend(
      out,
      Truncate(absl::StrCat(std::string(label + 2, ' '), first_step, PadLeft(last_step, room)),
               columns),
      "\n");
}

}  // namespace

int DisplayWidth(const std::string& line) {
  int width = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b') {
      // CSI: ESC [ parameters, then a final letter (skipped by the loop).
      ++i;
      if (i < line.size() && line[i] == '[') ++i;
      while (i < line.size() && !std::isalpha(static_cast<unsigned char>(line[i]))) ++i;
      continue;
    }
    if ((static_cast<unsigned char>(line[i]) & 0xC0) != 0x80) ++width;
  }
  return width;
}

std::string RenderTerminalChart(const Chart& chart, const TerminalOptions& options) {
  std::string out;
  for (size_t i = 0; i < chart.panels.size(); ++i) {
    if (i > 0) out += "\n";
    RenderPanel(chart, chart.panels[i], options, &out);
  }
  return out;
}

}  // namespace sbp::plot
