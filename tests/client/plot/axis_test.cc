// Tick positions and labels.
#include "client/plot/axis.h"

#include <gtest/gtest.h>

namespace sbp::plot {
namespace {

std::vector<std::string> Labels(const std::vector<Tick>& ticks) {
  std::vector<std::string> out;
  for (const Tick& t : ticks) out.push_back(t.label);
  return out;
}

TEST(AxisTest, LinearTicksAreRoundNumbersInsideTheRange) {
  EXPECT_EQ(Labels(Ticks(AxisScale{0.13, 5.8, false}, 5)),
            (std::vector<std::string>{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(Labels(Ticks(AxisScale{0.001, 0.0092, false}, 4)),
            (std::vector<std::string>{"0.002", "0.004", "0.006", "0.008"}));
  EXPECT_EQ(Labels(Ticks(AxisScale{-1, 1, false}, 4)),
            (std::vector<std::string>{"-1.0", "-0.5", "0.0", "0.5", "1.0"}));
}

TEST(AxisTest, StepTicksAreWholeNumbers) {
  EXPECT_EQ(Labels(Ticks(AxisScale{1, 4, false}, 10, /*integers=*/true)),
            (std::vector<std::string>{"1", "2", "3", "4"}));
  EXPECT_EQ(Labels(Ticks(AxisScale{1, 600, false}, 6, true)),
            (std::vector<std::string>{"100", "200", "300", "400", "500", "600"}));
}

TEST(AxisTest, LogTicksArePowersOfTen) {
  EXPECT_EQ(Labels(Ticks(AxisScale{0.005, 6, true}, 6)),
            (std::vector<std::string>{"0.01", "0.1", "1"}));
  EXPECT_EQ(Labels(Ticks(AxisScale{0.9, 11, true}, 8)),
            (std::vector<std::string>{"1", "2", "5", "10"}));
  // Within a decade: linear ticks, placed on the log scale.
  EXPECT_GE(Ticks(AxisScale{2.1, 2.9, true}, 4).size(), 2u);
}

TEST(AxisTest, FractionMapsTheRangeToZeroOne) {
  EXPECT_DOUBLE_EQ(AxisScale({2, 4, false}).Fraction(3), 0.5);
  EXPECT_DOUBLE_EQ(AxisScale({1, 100, true}).Fraction(10), 0.5);
}

}  // namespace
}  // namespace sbp::plot
