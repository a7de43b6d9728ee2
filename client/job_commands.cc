#include "client/job_commands.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli_common.h"
#include "client/job_output.h"
#include "client/job_watch.h"
#include "client/run_resume.h"
#include "client/spec_overrides.h"
#include "client/submit_resume.h"
#include "worker/model/file_util.h"
#include "worker/train/job_spec.h"

namespace sbp::cli {
namespace {

namespace v1 = streambp::v1;

// Ctrl-C (or SIGTERM) while following a job detaches from it and says so:
// the job keeps running. (`sbp run`, whose job lives only as long as it
// does, cancels instead and says that.) The message is formatted before the
// handler is installed: the handler only writes it and exits.
char g_detach_message[512];
size_t g_detach_length = 0;

void OnDetach(int signal) {
  const ssize_t written = write(STDERR_FILENO, g_detach_message, g_detach_length);
  (void)written;
  _exit(128 + signal);
}

int WatchDetaching(CoordinatorClient& client, const std::string& id, const char* verb) {
  std::snprintf(g_detach_message, sizeof(g_detach_message),
                "\nsbp %s: detached from job %s; it keeps running (`sbp watch %s` follows it "
                "again, `sbp cancel %s` stops it)\n",
                verb, id.c_str(), id.c_str(), id.c_str());
  g_detach_length = std::strlen(g_detach_message);
  std::signal(SIGINT, OnDetach);
  std::signal(SIGTERM, OnDetach);
  const int code = WatchJob(client, id, verb);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  return code;
}

// `--cancel-on-interrupt`: Ctrl-C (or SIGTERM) cancels the job, which
// checkpoints where it stops; the watch then follows it to CANCELLED and
// exits 128 + the signal. The same signal again quits at once.
std::atomic<int> g_cancel_signal{0};

void OnCancelSignal(int signal) {
  g_cancel_signal = signal;
  std::signal(signal, SIG_DFL);
}

int WatchCancelling(CoordinatorClient& client, const std::string& id, const char* verb) {
  g_cancel_signal = 0;
  std::signal(SIGINT, OnCancelSignal);
  std::signal(SIGTERM, OnCancelSignal);
  std::atomic<bool> done{false};
  std::thread canceller([&] {
    while (!done) {
      if (g_cancel_signal.load() != 0) {
        std::fprintf(stderr, "\nsbp %s: cancelling job %s (the same signal again quits at once)\n",
                     verb, id.c_str());
        absl::StatusOr<v1::Job> job = client.Cancel(id, "interrupted while watched");
        if (!job.ok()) {
          std::fprintf(stderr, "sbp %s: %s\n", verb, std::string(job.status().message()).c_str());
        }
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const int code = WatchJob(client, id, verb);
  done = true;
  canceller.join();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  const int signal = g_cancel_signal.load();
  return signal != 0 ? 128 + signal : code;
}

struct JobArgs {
  std::string spec_path;
  ResumeFlag resume;
  std::vector<std::string> overrides;  // submit: --set KEY=VALUE
  std::string id;
  std::string output;  // "" or "json"
  std::string request_id;
  std::string reason;
  std::vector<std::string> states;
  int limit = 100;
  bool with_spec = false;
  bool watch = false;
  bool cancel_on_interrupt = false;  // submit --watch: Ctrl-C cancels instead of detaching
  std::string user;                  // list: an admin's filter by owner
};

bool Json(const JobArgs& args) { return args.output == "json"; }

int Submit(const GlobalOptions& global, const JobArgs& args) {
  absl::StatusOr<std::string> spec = ReadJobSpecWithOverrides(args.spec_path, args.overrides);
  if (!spec.ok()) return ReportError("submit", spec.status());
  // The coordinator is the judge of the spec; the client reads it only for
  // the resume rule (a spec it cannot read goes as it is, to be refused there).
  absl::StatusOr<JobSpec> parsed =
      ParseJobSpec(*spec, SpecSourceName(args.spec_path, args.overrides));
  if (!parsed.ok() && args.resume.given) return ReportError("submit", parsed.status());
  int code = kExitOk;
  auto client = ConnectOrReport(global, "submit", &code);
  if (!client) return code;
  // --resume continues an ended run in place; without it an earlier job of
  // the same name is left as it is, and said so.
  std::optional<v1::Job> not_resumed;
  if (args.resume.given) {
    absl::StatusOr<std::string> run_dir = ServiceRunToResume(*client, *parsed, args.resume);
    if (!run_dir.ok()) return ReportError("submit", run_dir.status());
    absl::StatusOr<std::string> continuing = SpecContinuingRun(*spec, *run_dir);
    if (!continuing.ok()) return ReportError("submit", continuing.status());
    spec = *std::move(continuing);
    std::fprintf(stderr, "sbp submit: continuing the run in %s\n", run_dir->c_str());
  } else if (parsed.ok() && parsed->resume_from.empty()) {
    not_resumed = NewestJobNamed(*client, parsed->name);
  }
  const std::string request_id = args.request_id.empty() ? NewRequestId() : args.request_id;
  absl::StatusOr<v1::SubmitJobResponse> response = client->Submit(*spec, request_id);
  if (!response.ok()) return ReportRpcError("submit", response.status());
  const v1::Job& job = response->job();
  if (Json(args)) {
    std::printf("%s", ToJson(job, false).c_str());
  } else {
    std::printf("%s\n", job.id().c_str());
    std::fprintf(stderr, "%s %s: %s (%s)\n",
                 response->created() ? "submitted" : "already submitted (same request id)",
                 job.name().c_str(), StateName(job.state()).c_str(), job.reason().c_str());
  }
  if (not_resumed.has_value() && not_resumed->id() != job.id()) {
    std::fprintf(
        stderr,
        "sbp submit: a new run in %s; not resuming job %s (%s, step %lld, run %s): "
        "--resume continues it\n",
        job.run_dir().c_str(), not_resumed->id().c_str(), StateName(not_resumed->state()).c_str(),
        static_cast<long long>(not_resumed->progress().step()), not_resumed->run_dir().c_str());
  }
  std::fflush(stdout);
  if (!args.watch && !args.cancel_on_interrupt) return kExitOk;
  if (args.cancel_on_interrupt) return WatchCancelling(*client, job.id(), "submit");
  return WatchDetaching(*client, job.id(), "submit");
}

int List(const GlobalOptions& global, const JobArgs& args) {
  std::vector<v1::JobState> states;
  for (const std::string& s : args.states) {
    absl::StatusOr<v1::JobState> state = ParseState(s);
    if (!state.ok()) return ReportError("list", state.status());
    states.push_back(*state);
  }
  int code = kExitOk;
  auto client = ConnectOrReport(global, "list", &code);
  if (!client) return code;
  absl::StatusOr<v1::ListJobsResponse> jobs =
      client->List(states, args.limit, args.with_spec, args.user);
  if (!jobs.ok()) return ReportRpcError("list", jobs.status());
  if (Json(args)) {
    std::printf("%s", ToJson(*jobs, false).c_str());
  } else {
    std::printf("%s", JobsTable(*jobs).c_str());
    if (args.with_spec) std::printf("%s", JobSpecs(*jobs).c_str());
  }
  return kExitOk;
}

int Get(const GlobalOptions& global, const JobArgs& args) {
  int code = kExitOk;
  auto client = ConnectOrReport(global, "get", &code);
  if (!client) return code;
  absl::StatusOr<v1::Job> job = client->Get(args.id);
  if (!job.ok()) return ReportRpcError("get", job.status());
  std::printf("%s",
              Json(args) ? ToJson(*job, true).append("\n").c_str() : JobDetails(*job).c_str());
  return kExitOk;
}

int Watch(const GlobalOptions& global, const JobArgs& args) {
  int code = kExitOk;
  auto client = ConnectOrReport(global, "watch", &code);
  if (!client) return code;
  return WatchDetaching(*client, args.id, "watch");
}

int Cancel(const GlobalOptions& global, const JobArgs& args) {
  int code = kExitOk;
  auto client = ConnectOrReport(global, "cancel", &code);
  if (!client) return code;
  absl::StatusOr<v1::Job> job = client->Cancel(args.id, args.reason);
  if (!job.ok()) return ReportRpcError("cancel", job.status());
  if (Json(args)) {
    std::printf("%s", ToJson(*job, false).c_str());
  } else {
    std::printf("%s %s: %s\n", job->id().c_str(), StateName(job->state()).c_str(),
                job->reason().c_str());
  }
  return kExitOk;
}

int Events(const GlobalOptions& global, const JobArgs& args) {
  int code = kExitOk;
  auto client = ConnectOrReport(global, "events", &code);
  if (!client) return code;
  absl::StatusOr<v1::JobEventsResponse> events = client->Events(args.id, 0);
  if (!events.ok()) return ReportRpcError("events", events.status());
  std::printf("%s", Json(args) ? ToJson(*events, false).c_str() : EventsTable(*events).c_str());
  return kExitOk;
}

int WhoAmI(const GlobalOptions& global, const JobArgs& args) {
  int code = kExitOk;
  auto client = ConnectOrReport(global, "whoami", &code);
  if (!client) return code;
  absl::StatusOr<v1::WhoAmIResponse> me = client->WhoAmI();
  if (!me.ok()) return ReportRpcError("whoami", me.status());
  if (Json(args)) {
    std::printf("%s", ToJson(*me, false).c_str());
    return kExitOk;
  }
  auto limit = [](int64_t n) { return n > 0 ? std::to_string(n) : std::string("no limit"); };
  const std::string priority =
      me->has_max_priority() ? absl::StrCat("at most ", me->max_priority()) : "no limit";
  std::printf("%s (%s)\n  running workers: %s\n  pending jobs: %s\n  priority: %s\n",
              me->name().c_str(), me->role().c_str(), limit(me->max_running_workers()).c_str(),
              limit(me->max_pending_jobs()).c_str(), priority.c_str());
  return kExitOk;
}

int Workers(const GlobalOptions& global, const JobArgs& args) {
  int code = kExitOk;
  auto client = ConnectOrReport(global, "workers", &code);
  if (!client) return code;
  absl::StatusOr<v1::ListWorkersResponse> workers = client->ListWorkers();
  if (!workers.ok()) return ReportRpcError("workers", workers.status());
  std::printf("%s", Json(args) ? ToJson(*workers, false).c_str() : WorkersTable(*workers).c_str());
  return kExitOk;
}

void AddOutputFlag(CLI::App* command, JobArgs* args) {
  command->add_option("-o,--output", args->output, "output format: json")
      ->check(CLI::IsMember({"json", "table"}));
}

}  // namespace

void AddJobCommands(CLI::App& app, const GlobalOptions* global, int* exit_code) {
  auto args = std::make_shared<JobArgs>();
  auto bind = [global, args, exit_code](int (*fn)(const GlobalOptions&, const JobArgs&)) {
    return [global, args, exit_code, fn] { *exit_code = fn(*global, *args); };
  };

  CLI::App* submit = app.add_subcommand("submit", "submit a job spec to the coordinator");
  submit->add_option("job", args->spec_path, "job spec (YAML)");
  CLI::Option* resume = AddResumeOption(*submit, args->resume);
  AddSetOption(*submit, args->overrides);
  submit->add_flag("--watch", args->watch,
                   "follow the job to its end (exit code: its outcome); Ctrl-C detaches");
  submit->add_flag("--cancel-on-interrupt", args->cancel_on_interrupt,
                   "watch, and on Ctrl-C or SIGTERM cancel the job (it checkpoints where it "
                   "stops) instead of detaching");
  submit->add_option("--request-id", args->request_id,
                     "idempotency key: resubmitting with the same id returns the same job "
                     "(default: a new random id)");
  AddOutputFlag(submit, args.get());
  submit->callback([global, args, exit_code, resume] {
    if (absl::Status s = TakeResumeFlag(*resume, args->resume, args->spec_path); !s.ok()) {
      *exit_code = ReportError("submit", s);
      return;
    }
    *exit_code = Submit(*global, *args);
  });

  CLI::App* list = app.add_subcommand("list", "list jobs, newest first");
  list->add_option("--state", args->states, "only jobs in this state (repeatable)");
  list->add_option("--limit", args->limit, "at most this many jobs; 0: all")->capture_default_str();
  list->add_option("--user", args->user, "an admin's filter: only this user's jobs");
  list->add_flag("--with-spec", args->with_spec,
                 "also fetch each job's spec (printed after the table; spec_yaml in JSON)");
  AddOutputFlag(list, args.get());
  list->callback(bind(List));

  CLI::App* get = app.add_subcommand("get", "show one job");
  get->add_option("id", args->id, "job id")->required();
  AddOutputFlag(get, args.get());
  get->callback(bind(Get));

  CLI::App* watch = app.add_subcommand(
      "watch",
      "follow a job with a progress bar; exit code: 0 succeeded, 1 failed or cancelled, "
      "2 failed on bad input");
  watch->add_option("id", args->id, "job id")->required();
  watch->callback(bind(Watch));

  CLI::App* cancel = app.add_subcommand("cancel", "cancel a job (running jobs stop after a step)");
  cancel->add_option("id", args->id, "job id")->required();
  cancel->add_option("--reason", args->reason, "recorded with the cancellation");
  AddOutputFlag(cancel, args.get());
  cancel->callback(bind(Cancel));

  CLI::App* events =
      app.add_subcommand("events", "show a job's history: state changes and notices");
  events->add_option("id", args->id, "job id")->required();
  AddOutputFlag(events, args.get());
  events->callback(bind(Events));

  CLI::App* workers = app.add_subcommand("workers", "list the coordinator's workers");
  AddOutputFlag(workers, args.get());
  workers->callback(bind(Workers));

  CLI::App* whoami = app.add_subcommand("whoami", "show the identity the coordinator sees");
  AddOutputFlag(whoami, args.get());
  whoami->callback(bind(WhoAmI));
}

}  // namespace sbp::cli
