// Hostile input against the real `sbp` binary: numbers too large for the
// machine, a JSONL line nested 200,000 levels deep, a 20 GB sparse
// config.json, and a config.json that is /dev/zero or a FIFO. Each is a clear
// error naming the file (and line or field) with exit code 2, quickly and in
// little memory: never an abort, a segfault, a hang or an exhausted host.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kExitBadInput = 2;
// What a refused input may add to the resident set of `sbp --version` (the
// CUDA libraries alone take ~230 MB in a CUDA build).
constexpr long kMaxExtraRssBytes = 64L << 20;

struct Timed {
  CommandResult result;
  double seconds = 0;
  long peak_rss_bytes = 0;  // of the `sbp` process itself
};

// Runs `command` (an `sbp` command line) in `cwd` as RunCommand does, with the
// shell replaced by the command so that wait4() reports its peak RSS.
Timed RunMeasured(const std::string& command, const fs::path& cwd) {
  const std::string out = (cwd / ".stdout").string(), err = (cwd / ".stderr").string();
  const std::string full =
      "cd '" + cwd.string() + "' && exec " + command + " >'" + out + "' 2>'" + err + "' </dev/null";
  Timed t;
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  EXPECT_EQ(wait4(pid, &status, 0, &usage), pid);
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  t.peak_rss_bytes = usage.ru_maxrss * 1024L;
  t.result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (WIFSIGNALED(status)) t.result.exit_code = 128 + WTERMSIG(status);
  t.result.out = ReadAll(out);
  t.result.err = ReadAll(err);
  return t;
}

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir(std::string("hostile_input_") +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const CommandResult init =
        RunCommand(SbpBinary() + " model init --preset tiny-llama --seed 4 --out model", dir_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
    WriteFile(dir_ / "data.jsonl", "{\"input_ids\": [1, 20, 21, 2, 21, 20, 3]}\n");
    const Timed version = RunMeasured(SbpBinary() + " --version", dir_);
    ASSERT_EQ(version.result.exit_code, 0) << version.result.err;
    baseline_rss_bytes_ = version.peak_rss_bytes;
  }

  std::string Spec(const std::string& train = "sequences_per_step: 1",
                   const std::string& model = "model", const std::string& data = "data.jsonl") {
    return "name: hostile\nmodel: " + model + "\ndata: " + data +
           "\nobjective: sft\nseq_len: 32\n"
           "train: {steps: 2, lr: 1.0e-2, " +
           train + "}\ncheckpoint: {dir: run}\n";
  }

  Timed Run(const std::string& args) { return RunMeasured(SbpBinary() + " " + args, dir_); }

  Timed Train(const std::string& spec) {
    WriteFile(dir_ / "job.yaml", spec);
    return Run("train job.yaml");
  }

  // Exit code 2 with `text` in stderr, no sign of a crash, within `seconds`,
  // and little memory beyond what the binary takes to start.
  void ExpectBadInput(const Timed& t, const std::string& text, double seconds) {
    EXPECT_EQ(t.result.exit_code, kExitBadInput) << t.result.err;
    EXPECT_NE(t.result.err.find(text), std::string::npos) << t.result.err;
    EXPECT_EQ(t.result.err.find("terminate called"), std::string::npos) << t.result.err;
    EXPECT_LT(t.seconds, seconds) << t.result.err;
    EXPECT_LT(t.peak_rss_bytes, baseline_rss_bytes_ + kMaxExtraRssBytes)
        << "baseline " << baseline_rss_bytes_ << " bytes; " << t.result.err;
  }

  fs::path dir_;
  long baseline_rss_bytes_ = 0;
};

TEST_F(HostileInputTest, HugeSequencesPerStepIsAFieldError) {
  // Used to abort with std::length_error from vector::reserve.
  const Timed t = Train(Spec("sequences_per_step: 1152921504606846977"));
  ExpectBadInput(t,
                 "job.yaml: train.sequences_per_step: must be at most 1048576 (got "
                 "1152921504606846977)",
                 30);
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

TEST_F(HostileInputTest, DeeplyNestedJsonlLineNamesFileAndLine) {
  // Used to overflow the stack (exit 139) while printing the value.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  WriteFile(dir_ / "deep.jsonl", "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [" + deep + "]}\n");
  const Timed t = Train(Spec("sequences_per_step: 1", "model", "deep.jsonl"));
  ExpectBadInput(t, "deep.jsonl:2: JSON nested deeper than 64 levels", 30);
}

TEST_F(HostileInputTest, SparseTwentyGigabyteConfigIsRefusedBySize) {
  const fs::path config = dir_ / "model" / "config.json";
  fs::resize_file(config, uint64_t{20} << 30);  // holes: no disk, no reading
  const std::string expected =
      "model/config.json: has 21474836480 bytes, over the 1 MiB limit for config.json";
  ExpectBadInput(Run("plan --model model --seq-len 64"), expected, 5);
  ExpectBadInput(Train(Spec()), expected, 30);
}

TEST_F(HostileInputTest, ConfigThatIsDevZeroOrAFifoFailsAtOnce) {
  const fs::path config = dir_ / "model" / "config.json";
  fs::remove(config);
  fs::create_symlink("/dev/zero", config);
  ExpectBadInput(Run("plan --model model --seq-len 64"),
                 "model/config.json: is a character device, not a regular file", 1);
  ExpectBadInput(Train(Spec()), "config.json' is not a regular file", 30);

  fs::remove(config);
  ASSERT_EQ(::mkfifo(config.c_str(), 0600), 0);  // no writer: a plain open would block
  ExpectBadInput(Run("plan --model model --seq-len 64"),
                 "model/config.json: is a FIFO, not a regular file", 1);
  ExpectBadInput(Train(Spec()), "config.json' is not a regular file", 30);
}

TEST_F(HostileInputTest, JobSpecThatIsNotARegularFile) {
  fs::create_symlink("/dev/zero", dir_ / "zero.yaml");
  ExpectBadInput(Run("train zero.yaml"), "zero.yaml: is a character device, not a regular file", 5);
  ASSERT_EQ(::mkfifo((dir_ / "fifo.yaml").c_str(), 0600), 0);
  ExpectBadInput(Run("train fifo.yaml"), "fifo.yaml: is a FIFO, not a regular file", 5);
}

}  // namespace
}  // namespace sbp::testing
