#include "client/job_watch.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/job_output.h"
#include "client/progress.h"
#include "worker/agent/backoff.h"
#include "worker/train/job_spec.h"

namespace sbp::cli {
namespace {

namespace v1 = streambp::v1;
using Clock = std::chrono::steady_clock;

constexpr auto kGiveUpAfter = std::chrono::seconds(120);
constexpr auto kAwaitStopping = std::chrono::seconds(60);

bool Retryable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded ||
         status.code() == absl::StatusCode::kInternal ||
         status.code() == absl::StatusCode::kUnknown ||
         status.code() == absl::StatusCode::kCancelled;
}

int OutcomeExitCode(const v1::Job& job) {
  switch (job.state()) {
    case v1::JOB_STATE_SUCCEEDED:
      return 0;
    case v1::JOB_STATE_FAILED:
      return job.failure_class() == v1::FAILURE_CLASS_BAD_INPUT ? 2 : 1;
    default:
      return 1;
  }
}

std::string Clock24(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%H:%M:%S", absl::FromUnixSeconds(t.seconds()), absl::UTCTimeZone());
}

// Prints what happened to one job as its updates arrive.
class JobFollower {
 public:
  JobFollower(CoordinatorClient& client, const std::string& id)
      : client_(client), id_(id), printer_(stderr, isatty(STDERR_FILENO) != 0, 1) {}

  bool OnUpdate(const v1::Job& job) {
    if (!seen_any_) {
      seen_any_ = true;
      absl::StatusOr<JobSpec> spec = ParseJobSpec(job.spec_yaml(), "job");
      if (spec.ok())
        printer_ = ProgressPrinter(stderr, isatty(STDERR_FILENO) != 0, spec->log_every_steps);
      std::fprintf(stderr, "job %s (%s)\n", job.id().c_str(), job.name().c_str());
    }
    if (job.state() != state_) {
      state_ = job.state();
      PrintNewEvents(job);
    }
    const v1::JobProgress& p = job.progress();
    if (p.step() > 0 && p.step() != step_ && p.step_seconds() > 0) {
      step_ = p.step();
      ProgressSample sample{p.step(),       p.total_steps(), p.loss(),      p.tokens_per_second(),
                            p.peak_bytes(), p.eta_seconds(), p.eval_step(), p.eval_loss()};
      if (p.has_rollout()) {
        const v1::RolloutProgress& r = p.rollout();
        sample.rollout = RolloutSample{r.reward_mean(), r.reward_std(), r.completion_length_mean(),
                                       r.completion_length_max(), r.truncated_fraction()};
      }
      printer_.Update(sample);
    }
    last_ = job;
    return !IsTerminal(job.state());
  }

  void Finish() { printer_.Finish(); }
  const v1::Job& last() const { return last_; }
  bool done() const { return seen_any_ && IsTerminal(last_.state()); }

 private:
  // State changes since the last one printed (several may land in one update,
  // e.g. RETRYING then PENDING); falls back to the job's own reason.
  void PrintNewEvents(const v1::Job& job) {
    printer_.Finish();
    absl::StatusOr<v1::JobEventsResponse> events = client_.Events(id_, sequence_);
    if (events.ok()) {
      for (const v1::JobEvent& e : events->events()) {
        sequence_ = std::max(sequence_, e.sequence());
        if (e.to_state() == e.from_state() || e.to_state() == v1::JOB_STATE_UNSPECIFIED) {
          continue;  // a notice (checkpoint, log line), not a state change
        }
        std::fprintf(stderr, "%s  %-9s  %s\n", Clock24(e.time()).c_str(),
                     StateName(e.to_state()).c_str(), e.reason().c_str());
        printed_state_ = e.to_state();
      }
    }
    if (printed_state_ != job.state()) {
      printed_state_ = job.state();
      std::fprintf(stderr, "%s  %-9s  %s\n", Clock24(job.updated_at()).c_str(),
                   StateName(job.state()).c_str(), job.reason().c_str());
    }
    std::fflush(stderr);
  }

  CoordinatorClient& client_;
  std::string id_;
  ProgressPrinter printer_;
  bool seen_any_ = false;
  v1::JobState state_ = v1::JOB_STATE_UNSPECIFIED;
  v1::JobState printed_state_ = v1::JOB_STATE_UNSPECIFIED;  // of the last line printed
  int64_t step_ = 0;
  int64_t sequence_ = 0;
  v1::Job last_;
};

// A cancelled job's workers checkpoint the step they stop at and report it
// after the job turned CANCELLED: wait (bounded) for that last word, so that
// what is printed is what they committed.
v1::Job AwaitWorkersStopped(CoordinatorClient& client, const v1::Job& ended) {
  if (ended.state() != v1::JOB_STATE_CANCELLED) return ended;
  v1::Job job = ended;
  const auto give_up = Clock::now() + kAwaitStopping;
  while (true) {
    absl::StatusOr<v1::Job> now = client.Get(ended.id());
    if (!now.ok()) return job;
    job = *std::move(now);
    if (!job.stopping()) return job;
    if (Clock::now() > give_up) {
      std::fprintf(stderr, "(the workers of job %s had not reported their stop after %lld s)\n",
                   ended.id().c_str(), static_cast<long long>(kAwaitStopping.count()));
      return job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Where the run stopped: its directory, last step and last checkpoint, and
// how to continue it.
void PrintWhereItStopped(const v1::Job& job, const std::string& command) {
  if (job.run_dir().empty()) return;
  std::string line =
      absl::StrCat("run ", job.run_dir(), ": last step ", job.progress().step(), ", ");
  if (job.last_checkpoint().empty()) {
    absl::StrAppend(&line, "no checkpoint");
  } else {
    absl::StrAppend(&line, "last checkpoint ", job.last_checkpoint());
    if (job.state() != v1::JOB_STATE_SUCCEEDED) {
      // `sbp run` finds runs on disk (its coordinator is gone with it); a
      // coordinator finds the job.
      const bool local = command == "run";
      absl::StrAppend(&line, "; continue it with: sbp ", local ? "run" : "submit",
                      " JOB.yaml --resume ", local ? job.run_dir() : job.id());
    }
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

int WatchJob(CoordinatorClient& client, const std::string& id, const std::string& command) {
  JobFollower follower(client, id);
  Backoff backoff(std::chrono::milliseconds(250), std::chrono::milliseconds(3000));
  std::optional<Clock::time_point> failing_since;
  while (true) {
    const absl::Status status = client.Watch(id, [&](const v1::Job& job) {
      failing_since.reset();
      backoff.Reset();
      return follower.OnUpdate(job);
    });
    if (follower.done()) break;
    if (!status.ok() && !Retryable(status)) {
      follower.Finish();
      return ReportRpcError(command, status);
    }
    if (!failing_since.has_value()) {
      failing_since = Clock::now();
      follower.Finish();
      std::fprintf(stderr, "sbp %s: lost the coordinator (%s); watching again\n", command.c_str(),
                   status.ok() ? "stream ended" : std::string(status.message()).c_str());
    } else if (Clock::now() - *failing_since > kGiveUpAfter) {
      follower.Finish();
      return ReportRpcError(command, status.ok() ? absl::UnavailableError("stream ended") : status);
    }
    std::this_thread::sleep_for(backoff.Next());
  }
  follower.Finish();
  const v1::Job job = AwaitWorkersStopped(client, follower.last());
  PrintWhereItStopped(job, command);
  std::printf("job %s %s (attempt %d, step %lld): %s\n", job.id().c_str(),
              StateName(job.state()).c_str(), job.attempt(),
              static_cast<long long>(job.progress().step()), job.reason().c_str());
  std::fflush(stdout);
  return OutcomeExitCode(job);
}

}  // namespace sbp::cli
