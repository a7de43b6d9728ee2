#include "client/train_command.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli_common.h"
#include "client/progress.h"
#include "client/run_resume.h"
#include "client/spec_overrides.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/file_util.h"
#include "worker/train/job_spec.h"
#include "worker/train/run_directory.h"
#include "worker/train/trainer.h"

namespace sbp::cli {
namespace {

std::atomic<int> g_interrupted{0};  // the signal that asked to stop, 0 for none

void OnInterrupt(int signal) { g_interrupted = signal; }

struct TrainArgs {
  std::string spec_path;
  ResumeFlag resume;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  int64_t stop_after = 0;
  std::string device;  // "" = cpu, or cuda:0 for a job on cuda
};

class CliObserver final : public TrainingObserver {
 public:
  explicit CliObserver(int64_t every) : printer_(stderr, isatty(STDERR_FILENO) != 0, every) {}

  void OnStart(const JobSpec& spec, const RunStart& start) override {
    const int64_t resumed_step = start.resumed_step;
    start_ = std::chrono::steady_clock::now();
    first_step_ = resumed_step;
    last_step_ = resumed_step;
    if (resumed_step > 0) {
      std::fprintf(stderr, "resuming %s at step %lld%s%s\n", spec.name.c_str(),
                   static_cast<long long>(resumed_step), start.resumed_from.empty() ? "" : " from ",
                   start.resumed_from.c_str());
    }
  }
  void OnStep(const StepReport& r) override {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const int64_t done = r.step - first_step_;
    ProgressSample sample{r.step,       r.total_steps,
                          r.loss,       r.tokens_per_second,
                          r.peak_bytes, done > 0 ? elapsed / done * (r.total_steps - r.step) : -1,
                          r.eval_step,  r.eval_loss};
    printer_.Update(sample);
    last_step_ = r.step;
  }
  void OnCheckpoint(int64_t step, const std::string& path) override { last_checkpoint_ = path; }
  bool StopRequested() override { return g_interrupted.load() != 0; }
  void Finish() { printer_.Finish(); }
  int64_t last_step() const { return last_step_; }
  const std::string& last_checkpoint() const { return last_checkpoint_; }

 private:
  ProgressPrinter printer_;
  std::chrono::steady_clock::time_point start_;
  int64_t first_step_ = 0;
  int64_t last_step_ = 0;
  std::string last_checkpoint_;
};

// A path as the user would type it ("runs/x/..." rather than "./runs/x/...").
std::string Tidy(const std::string& path) {
  return path.empty() ? path : std::filesystem::path(path).lexically_normal().string();
}

// Prints and records in run.json where the run stopped, however it ended.
void ReportWhereItStopped(const std::string& run_dir, const std::string& spec_path,
                          const RunStop& stop) {
  const std::string checkpoint = stop.checkpoint.empty()
                                     ? std::string("no checkpoint yet")
                                     : absl::StrCat("checkpoint ", Tidy(stop.checkpoint));
  if (stop.how == "finished") {
    std::fprintf(stderr, "sbp train: %s finished at step %lld; %s\n", run_dir.c_str(),
                 static_cast<long long>(stop.step), checkpoint.c_str());
  } else {
    std::fprintf(stderr, "sbp train: %s stopped after step %lld (%s); last %s%s\n", run_dir.c_str(),
                 static_cast<long long>(stop.step), stop.how.c_str(), checkpoint.c_str(),
                 stop.checkpoint.empty()
                     ? ""
                     : absl::StrCat("; continue with: sbp train ", spec_path, " --resume ", run_dir)
                           .c_str());
  }
  if (absl::Status recorded = RecordRunStop(run_dir, stop); !recorded.ok()) {
    std::fprintf(stderr, "sbp train: could not record the stop in %s/run.json: %s\n",
                 run_dir.c_str(), std::string(recorded.message()).c_str());
  }
}

int RunTrain(const TrainArgs& args) {
  auto text = ReadJobSpecWithOverrides(args.spec_path, args.overrides);
  if (!text.ok()) return ReportError("train", text.status());
  auto spec = ParseJobSpec(*text, SpecSourceName(args.spec_path, args.overrides));
  if (!spec.ok()) return ReportError("train", spec.status());
  // The run this process writes: the one --resume names, else a new one.
  if (args.resume.given) {
    absl::StatusOr<std::string> run_dir = LocalRunToResume(*spec, args.resume, ".");
    if (!run_dir.ok()) return ReportError("train", run_dir.status());
    spec->checkpoint.dir = *run_dir;
    spec->resume_from = *run_dir;
  } else {
    std::string not_resumed;
    absl::StatusOr<std::string> run_dir = LocalRunForNewJob(*spec, ".", &not_resumed);
    if (!run_dir.ok()) return ReportError("train", run_dir.status());
    if (!not_resumed.empty()) {
      std::fprintf(stderr, "sbp train: a new run in %s; not resuming %s (--resume continues it)\n",
                   run_dir->c_str(), DescribeRun(not_resumed).c_str());
    }
    spec->checkpoint.dir = *run_dir;
  }
  const std::string run_dir = spec->checkpoint.dir;
  TrainOptions options;
  options.device = !args.device.empty()                          ? args.device
                   : spec->resources.device == DeviceKind::kCuda ? "cuda:0"
                                                                 : "cpu";
  options.stop_after_step = args.stop_after;
  CliObserver observer(spec->log_every_steps);
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  auto summary = RunTraining(*spec, options, &observer);
  observer.Finish();
  if (!summary.ok()) {
    if (HoldsRun(run_dir) && observer.last_step() > 0) {
      ReportWhereItStopped(run_dir, args.spec_path,
                           {"failed", observer.last_step(), Tidy(observer.last_checkpoint())});
    }
    return ReportError("train", summary.status());
  }
  const bool nothing_to_do = summary->last_step < summary->first_step && !summary->stopped_early;
  if (nothing_to_do) {
    std::fprintf(stderr,
                 "sbp train: %s already finished at step %lld of %lld; raise train.steps to "
                 "train further\n",
                 run_dir.c_str(), static_cast<long long>(summary->last_step),
                 static_cast<long long>(spec->train.steps));
  }
  const char* how = !summary->stopped_early           ? "finished"
                    : g_interrupted.load() == SIGTERM ? "terminated"
                    : g_interrupted.load() != 0       ? "interrupted"
                                                      : "--stop-after";
  ReportWhereItStopped(run_dir, args.spec_path,
                       {how, summary->last_step, Tidy(summary->last_checkpoint)});
  nlohmann::json line = {{"job", spec->name},
                         {"run_dir", run_dir},
                         {"first_step", summary->first_step},
                         {"last_step", summary->last_step},
                         {"final_loss", summary->final_loss},
                         {"stopped_early", summary->stopped_early},
                         {"checkpoint", Tidy(summary->last_checkpoint)},
                         {"peak_bytes", summary->peak_bytes}};
  std::printf("%s\n", line.dump().c_str());
  // Stopped by a signal: the shell's convention (130 Ctrl-C, 143 SIGTERM).
  return g_interrupted.load() != 0 ? 128 + g_interrupted.load() : kExitOk;
}

}  // namespace

void AddTrainCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand("train", "run a job in this process (one worker)");
  train->add_option("job", args->spec_path, "job spec (YAML)");
  CLI::Option* resume = AddResumeOption(*train, args->resume);
  AddSetOption(*train, args->overrides);
  train->add_option("--stop-after", args->stop_after, "stop (with a checkpoint) after this step");
  train->add_option(
      "--device", args->device,
      "cpu or cuda:N (default: cpu, or cuda:0 for a job with resources.device: cuda)");
  train->callback([args, exit_code, resume] {
    if (absl::Status s = TakeResumeFlag(*resume, args->resume, args->spec_path); !s.ok()) {
      *exit_code = ReportError("train", s);
      return;
    }
    *exit_code = RunTrain(*args);
  });
}

}  // namespace sbp::cli
