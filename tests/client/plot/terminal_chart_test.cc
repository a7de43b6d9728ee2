// The terminal chart: it fits the width, and says the range, the steps and
// the last value.
#include "client/plot/terminal_chart.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "client/plot/axis.h"

namespace sbp::plot {
namespace {

Chart Decreasing(int steps, bool with_eval) {
  Chart chart;
  chart.title = "tiny-sft";
  Panel panel;
  panel.main.name = "loss";
  panel.eval.name = "eval_loss";
  for (int step = 1; step <= steps; ++step) {
    const double loss = 0.25 + 5 * std::exp(-step / 30.0);
    panel.main.points.push_back({double(step), loss});
    if (with_eval && step % 25 == 0) panel.eval.points.push_back({double(step), loss});
  }
  chart.panels.push_back(panel);
  return chart;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(TerminalChartTest, FitsTheWidth) {
  for (int columns : {24, 40, 80, 132, 300}) {
    const std::string text = RenderTerminalChart(Decreasing(150, true), {columns, 8, false});
    const std::vector<std::string> lines = Lines(text);
    ASSERT_EQ(lines.size(), 1u + 8 + 2) << text;
    for (const std::string& line : lines) {
      EXPECT_LE(DisplayWidth(line), columns) << "columns " << columns << ": " << line;
    }
    // The axis spans the whole width.
    EXPECT_EQ(DisplayWidth(lines[9]), columns) << lines[9];
  }
}

TEST(TerminalChartTest, ShowsRangeStepsAndLastValue) {
  const Chart chart = Decreasing(150, true);
  const std::vector<std::string> lines = Lines(RenderTerminalChart(chart, {80, 10, false}));
  EXPECT_NE(lines[0].find("loss"), std::string::npos);
  EXPECT_NE(lines[0].find("tiny-sft"), std::string::npos);
  EXPECT_NE(lines[0].find("steps 1-150"), std::string::npos) << lines[0];
  const std::string first = FormatValue(chart.panels[0].main.points.front().value);
  const std::string last = FormatValue(chart.panels[0].main.points.back().value);
  EXPECT_NE(lines[0].find("last " + last), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("eval_loss"), std::string::npos) << lines[0];
  // Max on the top row, min on the bottom row.
  EXPECT_EQ(lines[1].find(first), 1u) << lines[1];
  EXPECT_EQ(lines[10].find(last), 0u) << lines[10];
  EXPECT_NE(lines.back().find("1"), std::string::npos);
  EXPECT_NE(lines.back().find("150"), std::string::npos);
}

TEST(TerminalChartTest, AFallingLineStartsTopLeftAndEndsBottomRight) {
  const std::vector<std::string> lines =
      Lines(RenderTerminalChart(Decreasing(150, false), {60, 6, false}));
  const std::string top = lines[1], bottom = lines[6];
  // Braille (U+28xx, UTF-8 E2 A0..A3 xx) right after the label on top, and
  // the bottom row's last character is braille too.
  const size_t after = top.find("\u2524") + std::string("\u2524").size();
  EXPECT_EQ(static_cast<unsigned char>(top[after]), 0xE2) << top;
  EXPECT_EQ(static_cast<unsigned char>(bottom[bottom.size() - 3]), 0xE2) << bottom;
  EXPECT_EQ(DisplayWidth(bottom), 60);
}

TEST(TerminalChartTest, EvalMarksAndColours) {
  const std::string plain = RenderTerminalChart(Decreasing(150, true), {80, 10, false});
  EXPECT_NE(plain.find("\u2022"), std::string::npos);
  EXPECT_EQ(plain.find("\x1b["), std::string::npos);
  const std::string colored = RenderTerminalChart(Decreasing(150, true), {80, 10, true});
  EXPECT_NE(colored.find("\x1b[33m\u2022"), std::string::npos);
  for (const std::string& line : Lines(colored)) EXPECT_LE(DisplayWidth(line), 80) << line;
  EXPECT_EQ(RenderTerminalChart(Decreasing(150, false), {80, 10, false}).find("\u2022"),
            std::string::npos);
}

TEST(TerminalChartTest, OneStepAndAFlatLineStillDraw) {
  Chart chart;
  chart.title = "r";
  Panel panel;
  panel.main.name = "loss";
  panel.main.points = {{7, 2.5}};
  chart.panels.push_back(panel);
  const std::string text = RenderTerminalChart(chart, {40, 4, false});
  EXPECT_NE(text.find("steps 7-7"), std::string::npos) << text;
  for (const std::string& line : Lines(text)) EXPECT_LE(DisplayWidth(line), 40) << line;
}

TEST(TerminalChartTest, DisplayWidthSkipsEscapes) {
  EXPECT_EQ(DisplayWidth("\x1b[34m\u2800\x1b[0mab"), 3);
}

}  // namespace
}  // namespace sbp::plot
