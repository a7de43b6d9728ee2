// The control plane at cluster scale. Steps, each printed as JSON lines:
//
//   scale_prefill     `queued_jobs` PENDING jobs written straight into a fresh
//                     SQLite file (one transaction), as a coordinator would
//                     have left them;
//   scale_recovery    sbp-coordinator started on that file (a separate process,
//                     --lease-seconds 15): until it answers List;
//   scale_register    `workers` simulated workers register over gRPC (100
//                     channels), then heartbeat every heartbeat_seconds of their
//                     Registration (5 s for the 15 s lease, as in production),
//                     each at its own phase; `churn_workers` of them also take
//                     their job (GetAssignment), report a step and finish it, so
//                     that workers keep freeing up with the queue full;
//   scale_submit      `submits` Submits from 4 concurrent clients at that depth;
//   scale_list_*      List(page_size=100): the first page and the middle page;
//   scale_heartbeat   every heartbeat of the whole run (latency; `late_*` how
//                     long after its due time it was sent);
//   scale_scheduling_pass   the coordinator's own sbp_scheduler_pass_seconds
//                     histogram over the run (quantiles as bucket bounds);
//   scale_scheduling_pass_inproc   one SchedulingPass in this process over a
//                     PendingIndex of `queued_jobs` jobs and `workers` workers
//                     (one idle: it places one job; none idle: it stops at once);
//   scale_coordinator RSS (VmRSS, VmHWM) and CPU of the coordinator process from
//                     /proc, and the workers it marked lost (must be 0).
#include "bench/control_plane_scale.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/control_plane_util.h"
#include "server/pending_index.h"
#include "server/scheduling_pass.h"
#include "server/store.h"
#include "streambp/v1/jobs.grpc.pb.h"
#include "streambp/v1/workers.grpc.pb.h"
#include "tests/server/process_util.h"
#include "worker/train/job_spec.h"

namespace sbp::bench {
namespace {

namespace v1 = streambp::v1;
using server::testing::ChildProcess;

// 100 connections open at once here: calls wait for theirs, as workers retry.
std::unique_ptr<grpc::ClientContext> Context(double seconds = 60) {
  return CallContext(seconds, /*wait_for_ready=*/true);
}

// Latencies gathered by several threads.
class Samples {
 public:
  void Add(double ms) {
    std::lock_guard<std::mutex> lock(mu_);
    v_.push_back(ms);
  }
  std::vector<double> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return v_;
  }

 private:
  std::mutex mu_;
  std::vector<double> v_;
};

// Counts a failed call and says why on stderr (the first few of them).
class Failures {
 public:
  void Add(const char* call, const grpc::Status& status) {
    const int n = ++count_;
    if (n <= 10) {
      std::fprintf(stderr, "%s failed: %d %s\n", call, static_cast<int>(status.error_code()),
                   status.error_message().c_str());
    }
  }
  int count() const { return count_.load(); }

 private:
  std::atomic<int> count_{0};
};

double Quantile(std::vector<double>& v, double q) {  // nearest rank; v sorted
  if (v.empty()) return 0;
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
  return v[std::min(v.size(), std::max<size_t>(i, 1)) - 1];
}

// "\"n\":..,\"p50_ms\":..,\"p90_ms\":..,\"p99_ms\":..,\"max_ms\":.."
std::string StatsJson(std::vector<double> v, const std::string& prefix = "") {
  std::sort(v.begin(), v.end());
  char out[256];
  std::snprintf(
      out, sizeof(out),
      "\"%sn\":%zu,\"%sp50_ms\":%.3f,\"%sp90_ms\":%.3f,\"%sp99_ms\":%.3f,\"%smax_ms\":%.3f",
      prefix.c_str(), v.size(), prefix.c_str(), Quantile(v, 0.5), prefix.c_str(), Quantile(v, 0.9),
      prefix.c_str(), Quantile(v, 0.99), prefix.c_str(), v.empty() ? 0.0 : v.back());
  return out;
}

void Print(const std::string& bench, const std::string& fields) {
  std::printf("{\"bench\":\"%s\",%s}\n", bench.c_str(), fields.c_str());
  std::fflush(stdout);
}

// CPU seconds (user + system) of process `pid`.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(text.substr(close + 2), ' ');
  double utime = 0, stime = 0;  // fields 14 and 15 of stat, 12 and 13 after "(comm) "
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime)) {
    return 0;
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A "VmRSS:" style line of /proc/<pid>/status, in MiB.
double ProcessMemoryMiB(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    double kb = 0;
    fields >> kb;
    return kb / 1024;
  }
  return 0;
}

// The value of the exposition line starting with `series` (name and labels).
double MetricValue(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, series + " ")) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
  }
  return -1;
}

// The smallest bucket bound of histogram `name` holding quantile `q`.
double HistogramQuantile(const std::string& text, const std::string& name, double q) {
  const double count = MetricValue(text, name + "_count");
  const double bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                           0.01,   0.025,   0.05,   0.1,   0.25,   1};
  for (double bound : bounds) {
    char le[64];
    std::snprintf(le, sizeof(le), "%s_bucket{le=\"%g\"}", name.c_str(), bound);
    if (MetricValue(text, le) >= q * count) return bound;
  }
  return INFINITY;
}

bool Prefill(const std::string& db, int jobs) {
  auto store = server::Store::Open(db);
  if (!store.ok()) return false;
  absl::StatusOr<JobSpec> spec = ParseJobSpec(BenchJobSpec("queued"), "spec");
  if (!spec.ok()) return false;
  const std::string json = JobSpecToJson(*spec);
  auto tx = (*store)->Begin();
  if (!tx.ok()) return false;
  const absl::Time now = absl::Now();
  for (int i = 0; i < jobs; ++i) {
    server::JobRecord job;
    job.id = absl::StrCat("queued-", i);
    job.name = "queued";
    job.spec_yaml = BenchJobSpec("queued");
    job.spec_json = json;
    job.state = server::JobState::kPending;
    job.reason = "no cpu workers registered";
    job.created_at = job.updated_at = job.queued_at = now;
    if (!(*store)->InsertJob(job).ok()) return false;
  }
  return tx->Commit().ok();
}

// One scheduling pass over `jobs` pending jobs and `workers` busy workers,
// `idle` of them idle, in this process.
double InProcessPassMs(int jobs, int workers, int idle, int repeats) {
  server::PendingIndex pending;
  for (int i = 0; i < jobs; ++i) {
    server::SchedulerJob job;
    job.id = absl::StrCat("queued-", i);
    job.seq = i + 1;
    pending.Add(job, "");
  }
  std::vector<server::SchedulerWorker> w;
  std::vector<server::RunningJob> running;
  for (int i = 0; i < workers; ++i) {
    w.push_back({absl::StrCat("w", i), DeviceKind::kCpu, int64_t{16} << 30, i < idle});
    if (i >= idle) running.push_back({absl::StrCat("r", i), i, 0, {w.back().id}, ""});
  }
  const server::ScheduleLimits limits;
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const Clock::time_point t0 = Clock::now();
    server::SchedulingPass pass(w, limits, running);
    pass.Run(pending, {});
    ms.push_back(MsSince(t0));
  }
  std::sort(ms.begin(), ms.end());
  return Quantile(ms, 0.5);
}

}  // namespace

int RunControlPlaneScale(const ScaleOptions& options) {
  std::filesystem::remove_all(options.dir);
  std::filesystem::create_directories(options.dir);
  const std::string db = options.dir + "/coordinator.db";
  const std::string log = options.dir + "/coordinator.log";

  Clock::time_point t0 = Clock::now();
  if (!Prefill(db, options.queued_jobs)) {
    std::fprintf(stderr, "prefilling %s failed\n", db.c_str());
    return 1;
  }
  Print("scale_prefill",
        absl::StrCat("\"jobs\":", options.queued_jobs, ",\"seconds\":", MsSince(t0) / 1000));

  const int metrics_port = server::testing::FreePort();
  t0 = Clock::now();
  ChildProcess coordinator(
      {options.coordinator, "--listen", "127.0.0.1:0", "--metrics-listen",
       absl::StrCat("127.0.0.1:", metrics_port), "--db", db, "--lease-seconds", "15"},
      log);
  const std::string address =
      server::testing::WaitForAddress(log, "coordinator serving gRPC on ", absl::Seconds(300));
  if (address.empty()) {
    std::fprintf(stderr, "the coordinator did not start; see %s\n", log.c_str());
    return 1;
  }
  constexpr int kChannels = 100;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);  // a connection each
    channels.push_back(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  auto jobs = v1::JobService::NewStub(channels[0]);
  {
    v1::ListJobsRequest request;
    request.set_page_size(1);
    v1::ListJobsResponse response;
    if (!jobs->List(Context().get(), request, &response).ok()) {
      std::fprintf(stderr, "List failed after start\n");
      return 1;
    }
  }
  Print("scale_recovery",
        absl::StrCat("\"jobs\":", options.queued_jobs, ",\"seconds\":", MsSince(t0) / 1000,
                     ",\"measured\":\"sbp-coordinator start on the prefilled "
                     "database until List answers\""));
  const pid_t pid = coordinator.pid();

  // Workers: register, then heartbeat at their interval, each at its own phase.
  std::atomic<bool> stop{false};
  std::atomic<int> registered{0};
  Failures failures;
  Samples register_ms, heartbeat_ms, late_ms;
  // Heartbeats while Submits and Lists run, and while only heartbeats and
  // the churn do.
  std::atomic<int> phase{0};  // 0: registering, 1: submits and lists, 2: quiet
  Samples heartbeat_by_phase[3];
  std::vector<std::string> worker_ids(options.workers);
  constexpr int kThreads = 16;
  std::vector<std::thread> threads;
  const Clock::time_point heartbeats_from = Clock::now();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      struct Sim {
        int index;
        Clock::time_point due;
      };
      std::vector<Sim> mine;
      std::chrono::milliseconds interval(5000);
      for (int i = t; i < options.workers; i += kThreads) {
        auto stub = v1::WorkerService::NewStub(channels[i % channels.size()]);
        v1::RegisterWorkerRequest request;
        request.set_name(absl::StrCat("sim-", i));
        request.set_device(v1::DEVICE_KIND_CPU);
        request.set_memory_bytes(int64_t{16} << 30);
        request.set_version("bench");
        v1::RegisterWorkerResponse response;
        const Clock::time_point r0 = Clock::now();
        if (grpc::Status s = stub->Register(Context().get(), request, &response); !s.ok()) {
          failures.Add("Register", s);
          continue;
        }
        register_ms.Add(MsSince(r0));
        worker_ids[i] = response.worker_id();
        interval = std::chrono::milliseconds(1000 * response.heartbeat_seconds());
        mine.push_back({i, Clock::now()});
        ++registered;
      }
      // Spread the phases over one interval.
      for (size_t k = 0; k < mine.size(); ++k) {
        mine[k].due = Clock::now() + interval * (k + 1) / (mine.size() + 1);
      }
      while (!stop.load() && !mine.empty()) {
        auto next = std::min_element(mine.begin(), mine.end(),
                                     [](const Sim& a, const Sim& b) { return a.due < b.due; });
        std::this_thread::sleep_until(next->due);
        if (stop.load()) break;
        auto stub = v1::WorkerService::NewStub(channels[next->index % channels.size()]);
        v1::HeartbeatRequest request;
        request.set_worker_id(worker_ids[next->index]);
        v1::HeartbeatResponse response;
        const Clock::time_point h0 = Clock::now();
        late_ms.Add(MsSince(next->due, h0));
        if (grpc::Status s = stub->Heartbeat(Context().get(), request, &response); !s.ok()) {
          failures.Add("Heartbeat", s);
        } else if (!response.registered()) {
          failures.Add("Heartbeat", grpc::Status(grpc::StatusCode::NOT_FOUND, "not registered"));
        }
        heartbeat_ms.Add(MsSince(h0));
        heartbeat_by_phase[phase.load()].Add(MsSince(h0));
        next->due += interval;
      }
    });
  }
  while (registered.load() + failures.count() < options.workers) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Print("scale_register",
        absl::StrCat(StatsJson(register_ms.Take()), ",\"workers\":", options.workers,
                     ",\"seconds\":", MsSince(heartbeats_from) / 1000));

  // Churn: some workers finish their job as soon as they have one.
  std::atomic<int> finished{0};
  std::thread churn([&] {
    auto stub = v1::WorkerService::NewStub(channels[1 % channels.size()]);
    int next = 0;
    while (!stop.load() && options.churn_workers > 0) {
      const std::string& id = worker_ids[next++ % options.churn_workers];
      v1::GetAssignmentRequest get;
      get.set_worker_id(id);
      get.set_wait_seconds(0);
      v1::GetAssignmentResponse got;
      if (stub->GetAssignment(Context().get(), get, &got).ok() && got.has_assignment()) {
        const v1::Assignment& a = got.assignment();
        v1::ReportProgressRequest report;
        report.set_worker_id(id);
        report.set_job_id(a.job_id());
        report.set_attempt(a.attempt());
        report.set_rank(a.rank());
        report.mutable_progress()->set_step(1);
        report.mutable_progress()->set_total_steps(1);
        v1::ReportProgressResponse reported;
        stub->ReportProgress(Context().get(), report, &reported);
        v1::FinishRequest finish;
        finish.set_worker_id(id);
        finish.set_job_id(a.job_id());
        finish.set_attempt(a.attempt());
        finish.set_rank(a.rank());
        finish.set_outcome(v1::OUTCOME_SUCCEEDED);
        v1::FinishResponse done;
        if (stub->Finish(Context().get(), finish, &done).ok()) ++finished;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  // Submits at full depth.
  phase = 1;
  const double cpu0 = ProcessCpuSeconds(pid);
  const Clock::time_point busy_from = Clock::now();
  Samples submit_ms;
  {
    constexpr int kSubmitters = 4;
    std::vector<std::thread> submitters;
    for (int s = 0; s < kSubmitters; ++s) {
      submitters.emplace_back([&, s] {
        auto stub = v1::JobService::NewStub(channels[(2 + s) % channels.size()]);
        for (int i = s; i < options.submits; i += kSubmitters) {
          v1::SubmitJobRequest request;
          request.set_spec_yaml(BenchJobSpec(absl::StrCat("late-", i)));
          v1::SubmitJobResponse response;
          const Clock::time_point s0 = Clock::now();
          if (grpc::Status s = stub->Submit(Context().get(), request, &response); !s.ok()) {
            failures.Add("Submit", s);
          }
          submit_ms.Add(MsSince(s0));
        }
      });
    }
    for (std::thread& t : submitters) t.join();
  }
  const double submit_seconds = MsSince(busy_from) / 1000;
  Print("scale_submit",
        absl::StrCat(StatsJson(submit_ms.Take()), ",\"queued_jobs\":", options.queued_jobs,
                     ",\"submitters\":4,\"jobs_per_second\":", options.submits / submit_seconds,
                     ",\"target_p99_ms\":50"));

  // List: the first page and the middle one.
  std::string middle_token;
  {
    v1::ListJobsRequest request;
    request.set_page_size(100);
    v1::ListJobsResponse response;
    for (int page = 0; page < (options.queued_jobs + options.submits) / 200; ++page) {
      request.set_page_token(middle_token);
      if (!jobs->List(Context().get(), request, &response).ok()) break;
      middle_token = response.next_page_token();
    }
  }
  Samples list_first, list_middle;
  for (int r = 0; r < options.lists; ++r) {
    for (int which = 0; which < 2; ++which) {
      v1::ListJobsRequest request;
      request.set_page_size(100);
      if (which == 1) request.set_page_token(middle_token);
      v1::ListJobsResponse response;
      const Clock::time_point l0 = Clock::now();
      if (grpc::Status s = jobs->List(Context().get(), request, &response); !s.ok()) {
        failures.Add("List", s);
      } else if (response.jobs_size() != 100) {
        failures.Add("List", grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "short page"));
      }
      (which == 0 ? list_first : list_middle).Add(MsSince(l0));
    }
  }
  const double busy_cpu = ProcessCpuSeconds(pid) - cpu0;
  const double busy_seconds = MsSince(busy_from) / 1000;
  Print("scale_list_first", absl::StrCat(StatsJson(list_first.Take()), ",\"target_ms\":20"));
  Print("scale_list_middle", absl::StrCat(StatsJson(list_middle.Take()), ",\"target_ms\":20"));

  // Then only heartbeats and churn until the run is long enough.
  phase = 2;
  const double cpu1 = ProcessCpuSeconds(pid);
  const Clock::time_point quiet_from = Clock::now();
  std::this_thread::sleep_until(heartbeats_from + std::chrono::seconds(options.seconds));
  const double quiet_seconds = MsSince(quiet_from) / 1000;
  const double quiet_cpu = ProcessCpuSeconds(pid) - cpu1;
  stop = true;
  churn.join();
  for (std::thread& t : threads) t.join();

  std::vector<double> beats = heartbeat_ms.Take();
  Print("scale_heartbeat", absl::StrCat(StatsJson(beats), ",", StatsJson(late_ms.Take(), "late_"),
                                        ",\"workers\":", options.workers, ",\"seconds\":",
                                        MsSince(heartbeats_from) / 1000, ",\"target_p99_ms\":20"));
  Print("scale_heartbeat_during_submits_and_lists", StatsJson(heartbeat_by_phase[1].Take()));
  Print("scale_heartbeat_quiet", StatsJson(heartbeat_by_phase[2].Take()));

  const std::optional<std::string> metrics =
      server::testing::HttpGet(absl::StrCat("127.0.0.1:", metrics_port), "/metrics");
  const std::string text = metrics.value_or("");
  const std::string pass = "sbp_scheduler_pass_seconds";
  const double passes = MetricValue(text, pass + "_count");
  Print("scale_scheduling_pass",
        absl::StrCat("\"passes\":", passes, ",\"mean_ms\":",
                     passes > 0 ? 1000 * MetricValue(text, pass + "_sum") / passes : 0,
                     ",\"p50_le_ms\":", 1000 * HistogramQuantile(text, pass, 0.5),
                     ",\"p99_le_ms\":", 1000 * HistogramQuantile(text, pass, 0.99),
                     ",\"max_le_ms\":", 1000 * HistogramQuantile(text, pass, 1.0),
                     ",\"jobs_finished_by_churn\":", finished.load(), ",\"target_ms\":10"));
  Print(
      "scale_scheduling_pass_inproc",
      absl::StrCat(
          "\"pending\":", options.queued_jobs, ",\"workers\":", options.workers,
          ",\"one_idle_p50_ms\":", InProcessPassMs(options.queued_jobs, options.workers, 1, 21),
          ",\"none_idle_p50_ms\":", InProcessPassMs(options.queued_jobs, options.workers, 0, 21)));
  const double lost = MetricValue(text, "sbp_workers{state=\"lost\"}");
  Print("scale_coordinator",
        absl::StrCat("\"rss_mib\":", ProcessMemoryMiB(pid, "VmRSS:"),
                     ",\"peak_rss_mib\":", ProcessMemoryMiB(pid, "VmHWM:"),
                     ",\"cpu_cores_busy\":", busy_cpu / busy_seconds,
                     ",\"cpu_cores_heartbeats_only\":", quiet_cpu / quiet_seconds,
                     ",\"pending_jobs\":", MetricValue(text, "sbp_jobs{state=\"pending\"}"),
                     ",\"lost_workers\":", lost, ",\"rpc_failures\":", failures.count()));
  coordinator.Signal(SIGTERM);
  coordinator.Wait(absl::Seconds(30));
  return lost == 0 && failures.count() == 0 ? 0 : 1;
}

}  // namespace sbp::bench
