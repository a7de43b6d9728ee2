// Reward programs as real child processes: small /bin/sh and python3
// scripts written at test time that score their input, fail in every way a
// program can, and stress the pipes (large input, floods, early exits).
#include "worker/train/rollout/reward_program.h"

#include <errno.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/train/rollout/reward.h"

namespace sbp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Python() {
  return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

std::vector<RewardInput> Inputs(int count) {
  std::vector<RewardInput> inputs(count);
  for (int i = 0; i < count; ++i) {
    inputs[i].prompt_ids = {1, 2};
    inputs[i].completion_ids = std::vector<int32_t>(i % 7, 5);
    inputs[i].completion_text = absl::StrCat("completion ", i);
  }
  return inputs;
}

int OpenFdCount() {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++count;
  }
  return count;
}

class RewardProgramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = absl::StrCat(::testing::TempDir(), "/reward-program-XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = std::filesystem::canonical(pattern).string();
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Writes `body` to dir_/name; returns "./name" (found through working_dir).
  std::string Script(const std::string& name, const std::string& body, bool executable = true) {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::ofstream(path) << body;
    ::chmod(path.c_str(), executable ? 0755 : 0644);
    return absl::StrCat("./", name);
  }

  absl::StatusOr<std::vector<double>> Run(std::vector<std::string> command,
                                          const std::vector<RewardInput>& inputs,
                                          double timeout_s = 20) {
    RewardContext context;
    context.working_dir = dir_;
    context.on_stderr_line = [this](const std::string& line) { stderr_lines_.push_back(line); };
    auto program = MakeRewardProgram(std::move(command), timeout_s, context);
    if (!program.ok()) return program.status();
    return (*program)->Score(inputs);
  }

  std::string dir_;
  std::vector<std::string> stderr_lines_;
};

TEST_F(RewardProgramTest, PythonScoresEveryFieldOfItsInput) {
  const std::string script = Script("score.py", R"(
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    assert list(d) == ["index", "prompt_ids", "completion_ids", "prompt", "completion",
                       "truncated", "fields"], list(d)
    r = (len(d["completion_ids"]) + 10 * d["index"] + 0.5 * d["truncated"]
         + d["fields"].get("bonus", 0) + 1000 * (d["completion"] == "caf\u00e9 \ufffd")
         + 10000 * (d["prompt"] == "p") + 100000 * (d["prompt_ids"] == [7, 8]))
    print(json.dumps({"reward": r, "note": "x"}) if d["index"] % 2 else r, flush=True)
    print("scored", d["index"], file=sys.stderr, flush=True)
)");
  std::vector<RewardInput> inputs(3);
  inputs[0].completion_ids = {1, 2, 3};
  inputs[0].fields = {{"bonus", 0.25}};
  inputs[1].truncated = true;
  inputs[1].completion_text = "caf\xc3\xa9 \xff";  // invalid UTF-8 arrives as U+FFFD
  inputs[2].prompt_ids = {7, 8};
  inputs[2].prompt_text = "p";
  auto rewards = Run({Python(), script}, inputs);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(3.25, 10 + 0.5 + 1000, 20 + 10000 + 100000));
  EXPECT_THAT(stderr_lines_, ElementsAre("scored 0", "scored 1", "scored 2"));
}

TEST_F(RewardProgramTest, ShellScriptOnPath) {
  const std::string script =
      Script("score.sh", "#!/bin/sh\nwhile read -r line; do echo 1.5; done\n");
  // No slash: looked up on PATH.
  const char* old_path = ::getenv("PATH");
  const std::string saved = old_path == nullptr ? "" : old_path;
  ::setenv("PATH", absl::StrCat(dir_, ":", saved).c_str(), 1);
  auto rewards = Run({"score.sh"}, Inputs(3));
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1.5, 1.5, 1.5));
}

TEST_F(RewardProgramTest, ArgumentsBlankLinesAndNoFinalNewline) {
  auto rewards = Run({"/bin/sh", "-c", "cat >/dev/null; printf '%s\\n\\n  \\n%s' \"$1\" \"$2\"",
                      "sh", "-2", "{\"reward\": 3e2}"},
                     Inputs(2));
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(-2, 300));
}

TEST_F(RewardProgramTest, RunsInTheWorkingDirectory) {
  const std::string script = Script("where.sh", "#!/bin/sh\npwd >&2\ncat > seen.jsonl\necho 0\n");
  auto rewards = Run({script}, Inputs(1));
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(stderr_lines_, ElementsAre(dir_));
  std::ifstream seen(absl::StrCat(dir_, "/seen.jsonl"));
  std::string line;
  ASSERT_TRUE(std::getline(seen, line));
  EXPECT_EQ(line,
            "{\"index\":0,\"prompt_ids\":[1,2],\"completion_ids\":[],\"prompt\":\"\","
            "\"completion\":\"completion 0\",\"truncated\":false,\"fields\":{}}");
}

TEST_F(RewardProgramTest, MissingWorkingDirectory) {
  RewardContext context;
  context.working_dir = absl::StrCat(dir_, "/nope");
  auto program = MakeRewardProgram({"/bin/true"}, 5, context);
  ASSERT_TRUE(program.ok()) << program.status();
  auto rewards = (*program)->Score(Inputs(1));
  EXPECT_EQ(rewards.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rewards.status().message(),
              HasSubstr("reward program '/bin/true': working directory"));
  EXPECT_THAT(rewards.status().message(), HasSubstr("No such file or directory"));
}

TEST_F(RewardProgramTest, NotFound) {
  auto rewards = Run({"sbp-no-such-reward-program"}, Inputs(2));
  EXPECT_EQ(rewards.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewards.status().message(),
            "reward program 'sbp-no-such-reward-program': cannot run it: No such file or "
            "directory");
  auto relative = Run({"./missing.py"}, Inputs(2));
  EXPECT_EQ(relative.status().message(),
            "reward program './missing.py': cannot run it: No such file or directory");
}

TEST_F(RewardProgramTest, NotExecutable) {
  const std::string script = Script("plain.sh", "#!/bin/sh\necho 1\n", /*executable=*/false);
  auto rewards = Run({script}, Inputs(1));
  EXPECT_EQ(rewards.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewards.status().message(),
            "reward program './plain.sh': cannot run it: Permission denied");
}

TEST_F(RewardProgramTest, ExitsNonZeroWithItsLastStderrLines) {
  const std::string script = Script("fail.sh",
                                    "#!/bin/sh\ncat >/dev/null\nfor i in 1 2 3 4 5 6 7; do echo "
                                    "\"line $i\" >&2; done\necho 1\necho 1\nexit 3\n");
  auto rewards = Run({script}, Inputs(2));
  EXPECT_EQ(rewards.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewards.status().message(),
            "reward program './fail.sh' exited with status 3; its last stderr lines: line 3 | "
            "line 4 | line 5 | line 6 | line 7");
  EXPECT_EQ(stderr_lines_.size(), 7u);
}

TEST_F(RewardProgramTest, KilledBySignal) {
  auto rewards = Run({"/bin/sh", "-c", "echo dying >&2; kill -SEGV $$"}, Inputs(2));
  EXPECT_EQ(rewards.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rewards.status().message(),
              HasSubstr("reward program '/bin/sh' was killed by signal 11 ("));
  EXPECT_THAT(rewards.status().message(), HasSubstr("dying"));
}

TEST_F(RewardProgramTest, HangIsKilledAtTheTimeout) {
  const std::string script = Script("hang.sh", "#!/bin/sh\nsleep 30\necho 1\n");
  const auto start = std::chrono::steady_clock::now();
  auto rewards = Run({script}, Inputs(2), /*timeout_s=*/1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(rewards.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewards.status().message(),
            "reward program './hang.sh' did not finish within 1 s (killed)");
  EXPECT_GE(seconds, 0.9);
  EXPECT_LT(seconds, 3);
}

TEST_F(RewardProgramTest, ProcessLeftBehindDoesNotHoldTheCall) {
  // The program answers and exits, but a background child keeps its stdout
  // and stderr open; the call returns at once and the child is killed.
  const std::string script =
      Script("background.sh", "#!/bin/sh\n(sleep 30 &)\nwhile read -r line; do echo 2; done\n");
  const auto start = std::chrono::steady_clock::now();
  auto rewards = Run({script}, Inputs(3), /*timeout_s=*/10);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(2, 2, 2));
  EXPECT_LT(seconds, 3);
}

TEST_F(RewardProgramTest, TooFewAndTooManyRewards) {
  auto few =
      Run({"/bin/sh", "-c", "read -r a; echo 1; read -r b; echo 1; read -r c; echo 1"}, Inputs(5));
  EXPECT_EQ(few.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(few.status().message(), "reward program '/bin/sh' wrote 3 rewards for 5 completions");
  auto many = Run({"/bin/sh", "-c", "while read -r l; do echo 1; echo 1; done"}, Inputs(5));
  EXPECT_EQ(many.status().message(), "reward program '/bin/sh' wrote 10 rewards for 5 completions");
  auto none = Run({"/bin/true"}, Inputs(2));
  EXPECT_EQ(none.status().message(),
            "reward program '/bin/true' wrote 0 rewards for 2 completions");
}

TEST_F(RewardProgramTest, LinesThatAreNotNumbers) {
  const auto fourth_line = [&](const std::string& text) {
    const std::string script =
        Script("bad.sh", absl::StrCat("#!/bin/sh\ncat >/dev/null\necho 1\necho 2\necho 3\necho '",
                                      text, "'\necho 5\n"));
    return Run({script}, Inputs(5));
  };
  auto abc = fourth_line("abc");
  EXPECT_EQ(abc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(abc.status().message(),
            "reward program './bad.sh', output line 4: \"abc\" is not a number");
  EXPECT_THAT(fourth_line("NaN").status().message(), HasSubstr("\"NaN\" is not a number"));
  EXPECT_THAT(fourth_line("true").status().message(), HasSubstr("\"true\" is not a number"));
  EXPECT_THAT(fourth_line("\"1\"").status().message(), HasSubstr("is not a number"));
  EXPECT_THAT(fourth_line("1 2").status().message(), HasSubstr("\"1 2\" is not a number"));
  // JSON has no infinity: an overflowing number is no number at all.
  EXPECT_THAT(std::string(fourth_line("1e999").status().message()),
              HasSubstr("output line 4: \"1e999\" is not a number"));
  EXPECT_THAT(fourth_line("{\"score\": 1}").status().message(),
              HasSubstr("output line 4: \"{\\\"score\\\": 1}\" has no number \"reward\""));
  EXPECT_THAT(fourth_line("{\"reward\": \"1\"}").status().message(),
              HasSubstr("has no number \"reward\""));
}

TEST_F(RewardProgramTest, LotsOfStderrBeforeReadingInput) {
  // 100k stderr lines before the program reads anything, then one 10 KB line.
  const std::string script = Script("noisy.sh",
                                    "#!/bin/sh\nseq 1 100000 | sed 's/^/log /' >&2\n"
                                    "head -c 10000 /dev/zero | tr '\\000' x >&2\necho >&2\n"
                                    "printf 'no newline at the end' >&2\n"
                                    "while read -r l; do echo 1; done\n");
  auto rewards = Run({script}, Inputs(1000));
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_EQ(rewards->size(), 1000u);
  ASSERT_EQ(stderr_lines_.size(), 100002u);
  EXPECT_EQ(stderr_lines_[0], "log 1");
  EXPECT_EQ(stderr_lines_[99999], "log 100000");
  EXPECT_EQ(stderr_lines_[100000], std::string(4096, 'x') + " [truncated]");
  EXPECT_EQ(stderr_lines_[100001], "no newline at the end");
}

TEST_F(RewardProgramTest, ExitsEarlyWithoutReadingItsInput) {
  // Megabytes of input the program never reads: writing it fails with EPIPE
  // (no SIGPIPE reaches this process) and the output still counts.
  std::vector<RewardInput> inputs = Inputs(5000);
  for (RewardInput& input : inputs) input.completion_text = std::string(1000, 'c');
  sigset_t before;
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, nullptr, &before), 0);
  auto rewards = Run({"/bin/sh", "-c", "yes 0.25 | head -n 5000"}, inputs);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_EQ(rewards->size(), 5000u);
  EXPECT_EQ(rewards->back(), 0.25);
  sigset_t after, pending;
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, nullptr, &after), 0);
  EXPECT_EQ(sigismember(&after, SIGPIPE), sigismember(&before, SIGPIPE));
  ASSERT_EQ(::sigpending(&pending), 0);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);
}

TEST_F(RewardProgramTest, LargeInputAndOutputWithoutDeadlock) {
  // 5000 completions of 300 ids (~8 MB in) and ~1 MB out: the program writes
  // while it reads, so both pipes must be served together.
  const std::string script = Script("echo.py", R"(
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    sys.stdout.write("%d%s\n" % (len(d["completion_ids"]) + d["index"], " " * 200))
)");
  std::vector<RewardInput> inputs(5000);
  for (int i = 0; i < 5000; ++i) inputs[i].completion_ids = std::vector<int32_t>(300, 123456);
  auto rewards = Run({Python(), script}, inputs);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  ASSERT_EQ(rewards->size(), 5000u);
  for (int i = 0; i < 5000; ++i) ASSERT_EQ((*rewards)[i], 300 + i) << i;
}

TEST_F(RewardProgramTest, EndlessStdoutIsCut) {
  auto rewards = Run({"/bin/sh", "-c", "exec yes 1"}, Inputs(2));
  EXPECT_EQ(rewards.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rewards.status().message(),
            "reward program '/bin/sh' wrote more than 64 MiB to stdout (killed)");
}

TEST_F(RewardProgramTest, DescriptorsOfTheTrainerDoNotLeakIntoTheProgram) {
  const int fd = ::open("/dev/null", O_RDONLY);  // inheritable: no O_CLOEXEC
  ASSERT_GE(fd, 3);
  auto rewards = Run({"/bin/sh", "-c",
                      absl::StrCat("cat >/dev/null; if [ -e /proc/$$/fd/", fd,
                                   " ]; then echo 1; else echo 0; fi")},
                     Inputs(1));
  ::close(fd);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(0));
}

TEST_F(RewardProgramTest, NoInputsRunsNothing) {
  auto rewards = Run({"sbp-no-such-reward-program"}, {});
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_TRUE(rewards->empty());
}

TEST_F(RewardProgramTest, LeaksNoDescriptorsOrZombies) {
  const int fds_before = OpenFdCount();
  const std::string ok = Script("ok.sh", "#!/bin/sh\nwhile read -r l; do echo 1; done\n");
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(Run({ok}, Inputs(3)).ok());
    EXPECT_FALSE(Run({"/bin/sh", "-c", "exit 1"}, Inputs(3)).ok());
    EXPECT_FALSE(Run({"sbp-no-such-reward-program"}, Inputs(3)).ok());
    EXPECT_FALSE(Run({"/bin/sh", "-c", "echo x"}, Inputs(3)).ok());
  }
  EXPECT_FALSE(Run({"/bin/sh", "-c", "sleep 5"}, Inputs(3), /*timeout_s=*/0.2).ok());
  EXPECT_EQ(OpenFdCount(), fds_before);
  int status = 0;
  errno = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1);  // no child left, not even a zombie
  EXPECT_EQ(errno, ECHILD);
}

TEST(MakeRewardProgramTest, Validation) {
  EXPECT_EQ(MakeRewardProgram({}, 1, RewardContext()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MakeRewardProgram({""}, 1, RewardContext()).status().message(),
              HasSubstr("grpo.reward.command"));
  EXPECT_THAT(MakeRewardProgram({"x"}, 0, RewardContext()).status().message(),
              HasSubstr("grpo.reward.timeout_s"));
}

}  // namespace
}  // namespace sbp
