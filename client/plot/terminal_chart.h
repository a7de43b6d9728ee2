// A compact chart for the terminal: the metric's line in Unicode braille
// (2x4 dots a character), eval values as '•', the value range on the left,
// the step range below, and a header with the last value.
#pragma once

#include <string>

#include "client/plot/chart.h"

namespace sbp::plot {

struct TerminalOptions {
  int columns = 80;    // no line is wider (in characters) when it is >= 24
  int rows = 10;       // chart rows of each panel
  bool color = false;  // ANSI colours for the line and the eval marks
};

// Every panel of `chart`, one after the other, each line ending in '\n'.
std::string RenderTerminalChart(const Chart& chart, const TerminalOptions& options);

// Characters (UTF-8 code points, ANSI escapes excluded) of `line`.
int DisplayWidth(const std::string& line);

}  // namespace sbp::plot
