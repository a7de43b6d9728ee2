// A worker name with a terminal escape sequence never reaches another
// user's terminal: sbp-worker refuses it at start (exit 2), the coordinator
// refuses it at Register (tests/server/validation_test.cc), and `sbp` tables
// escape control characters in any text another party controls.
#include <gtest/gtest.h>

#include <string>

#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

TEST(WorkerNameTest, ControlCharactersAreRefusedAtStart) {
  const std::filesystem::path dir = FreshDir("worker-name");
  const CommandResult r = RunCommand(BinaryDir() +
                                         "/bin/sbp-worker --coordinator 127.0.0.1:9 --device cpu "
                                         "--name \"$(printf 'evil\\033]0;pwned\\007')\"",
                                     dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--name: must be at most 128 characters of printable ASCII"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find('\033'), std::string::npos) << "the escape reached the terminal";
}

}  // namespace
}  // namespace sbp::testing
