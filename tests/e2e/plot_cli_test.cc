// `sbp plot` as a user runs it, on the run directory of a real `sbp train`:
// a PNG of the size asked that libpng decodes, a terminal chart that fits,
// and errors that name the path.
#include <gtest/gtest.h>

#include <sstream>

#include "tests/e2e/cli_test_util.h"
#include "tests/testing/png_read.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;

// One short training run with eval, shared by the tests.
class PlotCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(FreshDir("plot_cli"));
    const CommandResult init =
        RunCommand(SbpBinary() + " model init --preset tiny-llama --seed 4 --out model", *dir_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
    WriteFile(*dir_ / "data.jsonl",
              "{\"prompt_ids\": [1, 17, 18, 19, 2], \"completion_ids\": [19, 18, 17, 3]}\n"
              "{\"input_ids\": [1, 20, 21, 2, 21, 20, 3]}\n");
    WriteFile(*dir_ / "job.yaml",
              "name: plot-job\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 32\n"
              "streambp: {mode: stream, chunk_tokens: 4, logits_chunk_tokens: 4}\n"
              "train: {steps: 12, sequences_per_step: 2, lr: 1.0e-2}\n"
              "checkpoint: {every_steps: 12, dir: run}\n"
              "eval: {data: data.jsonl, every_steps: 4}\n");
    const CommandResult train = RunCommand(SbpBinary() + " train job.yaml", *dir_);
    ASSERT_EQ(train.exit_code, 0) << train.err;
  }
  static void TearDownTestSuite() { delete dir_; }

  static CommandResult Plot(const std::string& args) {
    return RunCommand(SbpBinary() + " plot " + args, *dir_);
  }

  static fs::path* dir_;
};

fs::path* PlotCliTest::dir_ = nullptr;

TEST_F(PlotCliTest, WritesAPngOfTheRequestedSize) {
  const CommandResult r = Plot("run --out loss.png --width 640 --height 360");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote loss.png (640x360 PNG): loss 12 points, eval_loss 3 points"),
            std::string::npos)
      << r.out;
  const DecodedPng png = DecodePng(ReadAll((*dir_ / "loss.png").string()));
  ASSERT_TRUE(png.ok) << png.error;
  EXPECT_EQ(png.width, 640);
  EXPECT_EQ(png.height, 360);
  // The line's blue and the eval markers' orange (client/plot/png_chart.h).
  int blue = 0, orange = 0;
  for (int y = 0; y < png.height; ++y) {
    for (int x = 0; x < png.width; ++x) {
      blue += png.At(x, y) == 0x1F77B4;
      orange += png.At(x, y) == 0xE6550D;
    }
  }
  EXPECT_GT(blue, 100);
  EXPECT_GT(orange, 30);
}

TEST_F(PlotCliTest, OtherMetricsOnePanelEach) {
  const CommandResult r = Plot("run --out m.png --metric grad_norm,lr --metric loss --log-y");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const DecodedPng png = DecodePng(ReadAll((*dir_ / "m.png").string()));
  ASSERT_TRUE(png.ok) << png.error;
  EXPECT_EQ(png.width, 900);
  EXPECT_EQ(png.height, 900);  // 300 a metric by default
}

TEST_F(PlotCliTest, DrawsInTheTerminalWithoutOut) {
  // stdout is a file here: the width comes from $COLUMNS.
  const CommandResult r = RunCommand("COLUMNS=72 " + SbpBinary() + " plot run", *dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loss  plot-job  steps 1-12  last "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\u2022 eval_loss"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos);  // no colours into a file
  std::istringstream lines(r.out);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    int width = 0;
    for (unsigned char c : line) width += (c & 0xC0) != 0x80;
    EXPECT_LE(width, 72) << line;
  }
  EXPECT_EQ(count, 13);  // header, 10 rows, axis, steps

  const CommandResult both = Plot("run --out t.png --terminal");
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_NE(both.out.find("wrote t.png"), std::string::npos);
  EXPECT_NE(both.out.find("steps 1-12"), std::string::npos);
}

TEST_F(PlotCliTest, ErrorsNameThePath) {
  CommandResult r = Plot("runs/nothing-here --out x.png");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("sbp plot: runs/nothing-here: no such run directory"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(*dir_ / "x.png"));

  fs::create_directories(*dir_ / "empty-run");
  r = Plot("empty-run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("empty-run/metrics.jsonl: not found"), std::string::npos) << r.err;

  WriteFile(*dir_ / "empty-run" / "metrics.jsonl", "");
  r = Plot("empty-run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("empty-run/metrics.jsonl: empty"), std::string::npos) << r.err;

  WriteFile(*dir_ / "empty-run" / "metrics.jsonl", "garbage\n{\"no\": \"step\"}\n");
  r = Plot("empty-run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("empty-run/metrics.jsonl: none of its 2 lines is a metrics record"),
            std::string::npos)
      << r.err;

  r = Plot("run --metric reward_mean");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("run/metrics.jsonl: no finite 'reward_mean' values in 12 metrics lines"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("grad_norm"), std::string::npos) << r.err;

  r = Plot("run --out x.png --width 50");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--width 50"), std::string::npos) << r.err;
}

TEST_F(PlotCliTest, MalformedLinesAreSkippedAndCounted) {
  const fs::path copy = *dir_ / "damaged";
  fs::create_directories(copy);
  WriteFile(copy / "metrics.jsonl", ReadAll((*dir_ / "run/metrics.jsonl").string()) +
                                        "{\"step\": 13, \"loss\": NaN}\n{\"step\": 14, \"lo");
  const CommandResult r = Plot("damaged --out d.png");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("skipped 1 malformed line of damaged/metrics.jsonl (the first: line 14)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("left out 1 non-finite value"), std::string::npos) << r.err;
  EXPECT_TRUE(DecodePng(ReadAll((copy / "../d.png").string())).ok);
}

TEST_F(PlotCliTest, AJobIdIsReadFromTheCoordinator) {
  // No coordinator listens there: the error says both readings of the name.
  const CommandResult r = Plot("--coordinator 127.0.0.1:1 tiny-sft-abc123");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("'tiny-sft-abc123' is no run directory here, and as a job id: "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sbp::testing
