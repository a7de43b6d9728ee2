// Bearer tokens: one token of visible ASCII, surrounding white space
// removed; anything else an error naming the source and the offending byte,
// never the token.
#include "common/bearer_token.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace sbp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(BearerToken, OneVisibleTokenWithWhiteSpaceAround) {
  EXPECT_EQ(*ParseBearerToken("s3cr3t-T0ken\n", "token file t"), "s3cr3t-T0ken");
  EXPECT_EQ(*ParseBearerToken("  \tabc~!\r\n", "x"), "abc~!");
}

TEST(BearerToken, ErrorsNameTheSourceAndNeverTheToken) {
  const std::string secret = "very-secret-token";
  for (const std::string& text : {secret + "\n" + secret + "-next\n", secret + " two",
                                  secret + "\x01", secret + "\x7f", secret + "\xc3\xa9"}) {
    absl::StatusOr<std::string> t = ParseBearerToken(text, "token file /run/t");
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(t.status().message());
    EXPECT_THAT(message, HasSubstr("token file /run/t is not one token: byte 18"));
    EXPECT_THAT(message, Not(HasSubstr("secret")));
  }
  EXPECT_THAT(std::string(ParseBearerToken(" \n", "$SBP_TOKEN").status().message()),
              HasSubstr("$SBP_TOKEN holds no token"));
  EXPECT_THAT(std::string(ParseBearerToken(std::string(5000, 'a'), "f").status().message()),
              HasSubstr("at most 4096"));
}

TEST(BearerToken, ReadsFiles) {
  const std::string path = ::testing::TempDir() + "/bearer_token_test.token";
  {
    std::ofstream out(path);
    out << "abc\n";
  }
  EXPECT_EQ(*ReadBearerTokenFile(path), "abc");
  {
    std::ofstream out(path);
    out << "old-token\nnew-token\n";
  }
  EXPECT_THAT(std::string(ReadBearerTokenFile(path).status().message()),
              HasSubstr("is not one token"));
  std::remove(path.c_str());
  EXPECT_THAT(std::string(ReadBearerTokenFile(path).status().message()),
              HasSubstr("cannot read token file"));
}

}  // namespace
}  // namespace sbp
