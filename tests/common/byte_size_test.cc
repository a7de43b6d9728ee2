#include "common/byte_size.h"

#include <gtest/gtest.h>

namespace sbp {
namespace {

TEST(ParseByteSize, BinaryAndDecimalUnits) {
  EXPECT_EQ(*ParseByteSize("8GiB"), 8LL << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("1KiB"), 1024);
  EXPECT_EQ(*ParseByteSize("2TiB"), 2LL << 40);
  EXPECT_EQ(*ParseByteSize("1.5GB"), 1500000000LL);
  EXPECT_EQ(*ParseByteSize("3kb"), 3000);
  EXPECT_EQ(*ParseByteSize("80G"), 80LL << 30);
}

// Kubernetes' binary quantities, as operators copy them from resource limits.
TEST(ParseByteSize, KubernetesBinaryQuantities) {
  EXPECT_EQ(*ParseByteSize("72Gi"), 72LL << 30);
  EXPECT_EQ(*ParseByteSize("500Mi"), 500LL << 20);
  EXPECT_EQ(*ParseByteSize("64Ki"), 64LL << 10);
  EXPECT_EQ(*ParseByteSize("2Ti"), 2LL << 40);
  EXPECT_EQ(*ParseByteSize("1.5Gi"), 3LL << 29);
  EXPECT_EQ(*ParseByteSize(" 8 gi "), 8LL << 30);
  for (const char* bad : {"Gi", "1Gii", "1iGi", "-1Gi", "1Pi"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
}

TEST(ParseByteSize, PlainBytesAndWhitespace) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize(" 16 MiB "), 16LL << 20);
  EXPECT_EQ(*ParseByteSize("7B"), 7);
  EXPECT_EQ(*ParseByteSize("0"), 0);
}

TEST(ParseByteSize, RejectsMalformedInputWithTheText) {
  for (const char* bad : {"", "GiB", "12 parsecs", "1.2.3GiB", "-1GiB", "nanGiB", "1e400"}) {
    auto result = ParseByteSize(bad);
    ASSERT_FALSE(result.ok()) << bad;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto result = ParseByteSize("12 parsecs");
  EXPECT_NE(result.status().message().find("12 parsecs"), std::string::npos);
}

TEST(FormatByteSize, PicksTheLargestUnit) {
  EXPECT_EQ(FormatByteSize(512), "512 B");
  EXPECT_EQ(FormatByteSize(1536), "1.5 KiB");
  EXPECT_EQ(FormatByteSize(9771876352LL), "9.1 GiB");
  EXPECT_EQ(FormatByteSize(-2048), "-2.0 KiB");
}

TEST(FormatByteSize, RoundTripsThroughParse) {
  EXPECT_EQ(*ParseByteSize(FormatByteSize(3LL << 30)), 3LL << 30);
}

}  // namespace
}  // namespace sbp
