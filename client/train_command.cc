#include "client/train_command.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "client/cli_common.h"
#include "client/progress.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/file_util.h"
#include "worker/train/job_spec.h"
#include "worker/train/trainer.h"

namespace sbp::cli {
namespace {

std::atomic<bool> g_interrupted{false};

void OnInterrupt(int) { g_interrupted = true; }

struct TrainArgs {
  std::string spec_path;
  bool no_resume = false;
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
  }
  void OnCheckpoint(int64_t step, const std::string& path) override { last_checkpoint_ = path; }
  bool StopRequested() override { return g_interrupted.load(); }
  void Finish() { printer_.Finish(); }

 private:
  ProgressPrinter printer_;
  std::chrono::steady_clock::time_point start_;
  int64_t first_step_ = 0;
  std::string last_checkpoint_;
};

int RunTrain(const TrainArgs& args) {
  auto text = ReadJobSpecFile(args.spec_path);
  if (!text.ok()) return ReportError("train", text.status());
  auto spec = ParseJobSpec(*text, args.spec_path);
  if (!spec.ok()) return ReportError("train", spec.status());
  TrainOptions options;
  options.device = !args.device.empty()                          ? args.device
                   : spec->resources.device == DeviceKind::kCuda ? "cuda:0"
                                                                 : "cpu";
  options.resume = !args.no_resume;
  options.stop_after_step = args.stop_after;
  CliObserver observer(spec->log_every_steps);
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  auto summary = RunTraining(*spec, options, &observer);
  observer.Finish();
  if (!summary.ok()) return ReportError("train", summary.status());
  nlohmann::json line = {{"job", spec->name},
                         {"first_step", summary->first_step},
                         {"last_step", summary->last_step},
                         {"final_loss", summary->final_loss},
                         {"stopped_early", summary->stopped_early},
                         {"checkpoint", summary->last_checkpoint},
                         {"peak_bytes", summary->peak_bytes}};
  std::printf("%s\n", line.dump().c_str());
  return g_interrupted ? kExitFailed : kExitOk;
}

}  // namespace

void AddTrainCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand("train", "run a job in this process (one worker)");
  train->add_option("job", args->spec_path, "job spec (YAML)")->required();
  train->add_flag("--no-resume", args->no_resume, "start over even if checkpoints exist");
  train->add_option("--stop-after", args->stop_after, "stop (with a checkpoint) after this step");
  train->add_option(
      "--device", args->device,
      "cpu or cuda:N (default: cpu, or cuda:0 for a job with resources.device: cuda)");
  train->callback([args, exit_code] { *exit_code = RunTrain(*args); });
}

}  // namespace sbp::cli
