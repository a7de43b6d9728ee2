// A token file that is not one token (two lines, as while a token is rotated
// by hand; a control byte) is refused by every binary with exit code 2 and an
// error naming the file, never printing either token: before, gRPC aborted
// the process on the metadata value and the abort message showed both.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

void ExpectRefused(const CommandResult& r, const std::string& path, const char* binary) {
  EXPECT_EQ(r.exit_code, 2) << binary << ": " << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << binary << ": " << r.err;
  EXPECT_NE(r.err.find("is not one token"), std::string::npos) << binary << ": " << r.err;
  for (const std::string& output : {r.out, r.err}) {
    EXPECT_EQ(output.find("old-secret"), std::string::npos) << binary << " printed a token";
    EXPECT_EQ(output.find("new-secret"), std::string::npos) << binary << " printed a token";
  }
}

TEST(TokenFileTest, NotOneTokenExitsTwoWithoutPrintingIt) {
  const std::filesystem::path dir = FreshDir("token-file");
  for (const std::string& content :
       {std::string("old-secret\nnew-secret\n"), std::string("old-secret\x01new-secret\n")}) {
    const std::string path = (dir / "bad.token").string();
    WriteFile(path, content);
    ExpectRefused(
        RunCommand(SbpBinary() + " list --coordinator 127.0.0.1:9 --token-file " + path, dir), path,
        "sbp");
    ExpectRefused(RunCommand(BinaryDir() +
                                 "/bin/sbp-worker --coordinator 127.0.0.1:9 --device "
                                 "cpu --token-file " +
                                 path,
                             dir),
                  path, "sbp-worker");
    ExpectRefused(RunCommand(BinaryDir() + "/bin/sbp-coordinator --listen 127.0.0.1:0 --db " +
                                 (dir / "c.db").string() + " --client-token-file " + path +
                                 " --worker-token-file " + path,
                             dir),
                  path, "sbp-coordinator");
  }
  // The same rule for $SBP_TOKEN.
  const CommandResult env = RunCommand("SBP_TOKEN=\"$(printf 'old-secret\\nnew-secret')\" " +
                                           SbpBinary() + " list --coordinator 127.0.0.1:9",
                                       dir);
  EXPECT_EQ(env.exit_code, 2) << env.err;
  EXPECT_NE(env.err.find("$SBP_TOKEN is not one token"), std::string::npos) << env.err;
  EXPECT_EQ(env.err.find("secret"), std::string::npos) << env.err;
}

}  // namespace
}  // namespace sbp::testing
