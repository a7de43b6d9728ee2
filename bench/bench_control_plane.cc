// Control-plane benchmark: an in-process coordinator (Coordinator::Start on
// 127.0.0.1:0, fresh SQLite file, no tokens) driven through real gRPC stubs
// over loopback. Prints one JSON line per measurement (DESIGN.md §6):
//
//   submit_to_running   Submit -> first Watch update with state RUNNING, with one
//                       idle worker played by this program (Register, GetAssignment
//                       long-poll, ReportProgress step 1, Finish). No model is
//                       loaded: the figure is control-plane latency only.
//   submit_rpc          the Submit RPC alone (same runs).
//   store_jobs          submitting the stored jobs for `list_*` (throughput).
//   list_100_of_N       List(page_size=100), first page and a middle page.
//   watch_100_watchers  one change (ReportProgress) until all 100 Watch streams saw it
//                       (each watcher on its own connection, as 100 clients).
//   watch_idle_cpu      process CPU time over 5 s with 0 and with 100 idle watchers.
//
// Each measurement uses its own fresh coordinator so that none sees the others' jobs.
//
//   sbp-bench-control-plane [--quick]   (--quick: 1000 stored jobs, 10 submits)
//
// --scale runs the cluster-scale measurements instead (bench/control_plane_scale.cc):
// a separate sbp-coordinator with a deep queue and many heartbeating workers.
//
//   sbp-bench-control-plane --scale [--jobs N] [--workers N] [--submits N] [--seconds S]
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/control_plane_scale.h"
#include "bench/control_plane_util.h"
#include "common/logging.h"
#include "server/coordinator.h"
#include "streambp/v1/jobs.grpc.pb.h"
#include "streambp/v1/workers.grpc.pb.h"

namespace {

namespace v1 = streambp::v1;
using sbp::bench::Clock;
using sbp::bench::MsSince;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "sbp-bench-control-plane: %s\n", what.c_str());
  std::exit(1);
}

void Check(const grpc::Status& status, const char* what) {
  if (!status.ok()) Die(std::string(what) + ": " + status.error_message());
}

std::unique_ptr<grpc::ClientContext> Context(double seconds = 30) {
  return sbp::bench::CallContext(seconds, /*wait_for_ready=*/false);
}

using sbp::bench::BenchJobSpec;

struct Stats {
  int n = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {  // nearest rank
    size_t i = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
    return v[std::min(v.size(), std::max<size_t>(i, 1)) - 1];
  };
  s.n = static_cast<int>(v.size());
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

// {"bench":...,"n":...,"p50_ms":...,...<extra>}
void PrintStats(const std::string& bench, const Stats& s, const std::string& extra) {
  std::printf(
      "{\"bench\":\"%s\",\"n\":%d,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,"
      "\"max_ms\":%.3f,\"mean_ms\":%.3f%s%s}\n",
      bench.c_str(), s.n, s.p50, s.p90, s.p99, s.max, s.mean, extra.empty() ? "" : ",",
      extra.c_str());
  std::fflush(stdout);
}

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// A fresh coordinator in its own directory, plus stubs on one channel.
class Harness {
 public:
  Harness(const std::filesystem::path& root, const std::string& name) : dir_(root / name) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    sbp::server::CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.db_path = (dir_ / "coordinator.db").string();
    auto started = sbp::server::Coordinator::Start(options);
    if (!started.ok()) Die("starting the coordinator: " + started.status().ToString());
    coordinator_ = std::move(*started);
    channel_ = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
    jobs_ = v1::JobService::NewStub(channel_);
    workers_ = v1::WorkerService::NewStub(channel_);
  }
  ~Harness() {
    jobs_.reset();
    workers_.reset();
    channel_.reset();
    coordinator_.reset();  // Shutdown
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  v1::JobService::Stub& jobs() { return *jobs_; }
  // A JobService stub on a connection of its own, as another client (another
  // `sbp watch`) would have: one connection carries at most
  // --max-streams-per-connection (100) calls at once.
  std::unique_ptr<v1::JobService::Stub> OwnClient(int id) const {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", id);  // distinct arguments: a connection of its own
    return v1::JobService::NewStub(grpc::CreateCustomChannel(
        coordinator_->address(), grpc::InsecureChannelCredentials(), args));
  }
  v1::WorkerService::Stub& workers() { return *workers_; }

  v1::Job Submit(const std::string& spec) {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(spec);
    v1::SubmitJobResponse response;
    Check(jobs_->Submit(Context().get(), request, &response), "Submit");
    return response.job();
  }
  std::string Register(const std::string& name) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    request.set_device(v1::DEVICE_KIND_CPU);
    request.set_memory_bytes(int64_t{16} << 30);
    request.set_version("bench");
    v1::RegisterWorkerResponse response;
    Check(workers_->Register(Context().get(), request, &response), "Register");
    return response.worker_id();
  }
  bool GetAssignment(const std::string& worker_id, int wait_seconds, v1::Assignment* out) {
    v1::GetAssignmentRequest request;
    request.set_worker_id(worker_id);
    request.set_wait_seconds(wait_seconds);
    v1::GetAssignmentResponse response;
    Check(workers_->GetAssignment(Context(wait_seconds + 30).get(), request, &response),
          "GetAssignment");
    if (!response.has_assignment()) return false;
    *out = response.assignment();
    return true;
  }
  void Report(const std::string& worker_id, const v1::Assignment& a, int64_t step) {
    v1::ReportProgressRequest request;
    request.set_worker_id(worker_id);
    request.set_job_id(a.job_id());
    request.set_attempt(a.attempt());
    request.set_rank(a.rank());
    request.mutable_progress()->set_step(step);
    request.mutable_progress()->set_total_steps(1000);
    request.mutable_progress()->set_loss(2.5);
    request.mutable_progress()->set_tokens_per_second(1000);
    request.mutable_progress()->set_peak_bytes(1 << 20);
    v1::ReportProgressResponse response;
    Check(workers_->ReportProgress(Context().get(), request, &response), "ReportProgress");
  }
  void Finish(const std::string& worker_id, const v1::Assignment& a, v1::Outcome outcome) {
    v1::FinishRequest request;
    request.set_worker_id(worker_id);
    request.set_job_id(a.job_id());
    request.set_attempt(a.attempt());
    request.set_rank(a.rank());
    request.set_outcome(outcome);
    v1::FinishResponse response;
    Check(workers_->Finish(Context().get(), request, &response), "Finish");
  }
  void Cancel(const std::string& id) {
    v1::CancelJobRequest request;
    request.set_id(id);
    request.set_reason("benchmark done");
    v1::Job job;
    Check(jobs_->Cancel(Context().get(), request, &job), "Cancel");
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<sbp::server::Coordinator> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
};

// ---------------------------------------------------------------------------
// 1. Submit -> RUNNING with one idle worker.

void BenchSubmitToRunning(const std::filesystem::path& root, int jobs) {
  Harness h(root, "submit_to_running");

  // The worker: long-polls, reports step 1 at once (SCHEDULED -> RUNNING), then
  // holds the job until the client has seen RUNNING (so that the Watch opened
  // after Submit cannot miss it), then finishes it.
  std::mutex mu;
  std::condition_variable cv;
  std::string seen_running;  // job id the client last saw RUNNING
  std::atomic<bool> stop{false};
  const std::string worker_id = h.Register("bench-worker");
  std::thread worker([&] {
    while (!stop.load()) {
      v1::Assignment a;
      if (!h.GetAssignment(worker_id, 1, &a)) continue;
      h.Report(worker_id, a, 1);
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::seconds(10),
                    [&] { return seen_running == a.job_id() || stop.load(); });
      }
      h.Finish(worker_id, a, v1::OUTCOME_SUCCEEDED);
    }
  });

  std::vector<double> to_running, submit_rpc;
  for (int i = 0; i < jobs; ++i) {
    const Clock::time_point start = Clock::now();
    const v1::Job job = h.Submit(BenchJobSpec("bench-" + std::to_string(i)));
    submit_rpc.push_back(MsSince(start));
    auto context = Context();
    v1::WatchJobRequest request;
    request.set_id(job.id());
    auto reader = h.jobs().Watch(context.get(), request);
    v1::JobUpdate update;
    bool running = false;
    while (reader->Read(&update)) {
      if (update.job().state() == v1::JOB_STATE_RUNNING) {
        to_running.push_back(MsSince(start));
        running = true;
        {
          std::lock_guard<std::mutex> lock(mu);
          seen_running = job.id();
        }
        cv.notify_all();
        // Read on to the end (SUCCEEDED) so the worker is idle again before the next Submit.
      }
    }
    Check(reader->Finish(), "Watch");
    if (!running) Die("job " + job.id() + " never reported RUNNING to its watcher");
  }
  stop = true;
  cv.notify_all();
  worker.join();

  PrintStats("submit_to_running", Summarize(to_running),
             "\"measured\":" +
                 Quote("client Submit call -> first Watch JobUpdate with state RUNNING; one idle "
                       "worker that reports step 1 as soon as it gets the assignment; no model "
                       "load") +
                 ",\"target_p50_ms\":200");
  PrintStats("submit_rpc", Summarize(submit_rpc),
             "\"measured\":" + Quote("the Submit RPC alone (same jobs)"));
}

// ---------------------------------------------------------------------------
// 2. List over many stored jobs.

void BenchList(const std::filesystem::path& root, int stored, int repeats) {
  Harness h(root, "list");
  // No worker: every job stays PENDING. A few submitters in parallel.
  constexpr int kSubmitters = 4;
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> submitters;
  std::vector<double> latency(stored);  // by submission index
  for (int t = 0; t < kSubmitters; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = t; i < stored; i += kSubmitters) {
        const Clock::time_point t0 = Clock::now();
        h.Submit(BenchJobSpec("stored-" + std::to_string(i)));
        latency[i] = MsSince(t0);
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  const double submit_s = MsSince(start) / 1000;
  const int tenth = std::max(1, stored / 10);
  const Stats early = Summarize({latency.begin(), latency.begin() + tenth});
  const Stats late = Summarize({latency.end() - tenth, latency.end()});
  std::printf(
      "{\"bench\":\"store_jobs\",\"n\":%d,\"seconds\":%.3f,\"jobs_per_second\":%.1f,"
      "\"submitters\":%d,\"first_tenth_submit_p50_ms\":%.3f,\"last_tenth_submit_p50_ms\":%.3f,"
      "\"measured\":\"Submit of N jobs that stay PENDING (no worker), %d concurrent "
      "submitters\"}\n",
      stored, submit_s, stored / submit_s, kSubmitters, early.p50, late.p50, kSubmitters);
  std::fflush(stdout);

  auto list = [&](const std::string& token, v1::ListJobsResponse* out) {
    v1::ListJobsRequest request;
    request.set_page_size(100);
    request.set_page_token(token);
    out->Clear();
    Check(h.jobs().List(Context().get(), request, out), "List");
    if (out->jobs_size() != 100) Die("List returned " + std::to_string(out->jobs_size()) + " jobs");
  };

  // Walk to the middle page once to get its token.
  const int middle = stored / 100 / 2;
  std::string token;
  v1::ListJobsResponse response;
  for (int page = 0; page < middle; ++page) {
    list(token, &response);
    token = response.next_page_token();
  }
  std::vector<double> first, mid;
  for (int r = 0; r < repeats; ++r) {  // interleaved
    Clock::time_point t0 = Clock::now();
    list("", &response);
    first.push_back(MsSince(t0));
    t0 = Clock::now();
    list(token, &response);
    mid.push_back(MsSince(t0));
  }
  const std::string name = "list_100_of_" + std::to_string(stored);
  PrintStats(name, Summarize(first),
             "\"page\":\"first\",\"stored_jobs\":" + std::to_string(stored) + ",\"measured\":" +
                 Quote("List(page_size=100) RPC, 100 jobs returned") + ",\"target_ms\":20");
  PrintStats(
      name, Summarize(mid),
      "\"page\":\"middle (" + std::to_string(middle + 1) + " of " + std::to_string(stored / 100) +
          ", via page_token)\",\"stored_jobs\":" + std::to_string(stored) + ",\"measured\":" +
          Quote("List(page_size=100) RPC, 100 jobs returned") + ",\"target_ms\":20");
}

// ---------------------------------------------------------------------------
// 3. 100 watchers on one job.

void BenchWatch(const std::filesystem::path& root, int watchers, int changes, int idle_seconds) {
  Harness h(root, "watch");
  const std::string worker_id = h.Register("bench-worker");
  const v1::Job job = h.Submit(BenchJobSpec("watched"));
  v1::Assignment a;
  if (!h.GetAssignment(worker_id, 10, &a)) Die("no assignment for the watched job");
  h.Report(worker_id, a, 1);  // RUNNING

  // Baseline: process CPU over the idle period with no watcher.
  double cpu0 = CpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));
  const double idle_cpu_none = CpuSeconds() - cpu0;

  std::mutex mu;
  std::condition_variable cv;
  int64_t target_step = 1;
  int seen = 0, started = 0, ended_ok = 0;
  Clock::time_point last_seen, first_seen;
  std::vector<std::thread> threads;
  for (int i = 0; i < watchers; ++i) {
    threads.emplace_back([&, i] {
      auto context = Context(600);
      v1::WatchJobRequest request;
      request.set_id(job.id());
      std::unique_ptr<v1::JobService::Stub> client = h.OwnClient(i);
      auto reader = client->Watch(context.get(), request);
      v1::JobUpdate update;
      bool first = true;
      v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
      while (reader->Read(&update)) {
        const Clock::time_point now = Clock::now();
        last_state = update.job().state();
        std::lock_guard<std::mutex> lock(mu);
        if (first) {
          ++started;
          first = false;
        } else if (update.job().progress().step() == target_step) {
          if (seen == 0) first_seen = now;
          ++seen;
          last_seen = now;
        }
        cv.notify_all();
      }
      const bool ok = reader->Finish().ok();
      std::lock_guard<std::mutex> lock(mu);
      if (ok && last_state == v1::JOB_STATE_CANCELLED) ++ended_ok;
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return started == watchers; })) {
      Die("not all watchers got their snapshot");
    }
  }

  std::vector<double> all, first_watcher;
  for (int c = 0; c < changes; ++c) {
    Clock::time_point t0;
    {
      std::lock_guard<std::mutex> lock(mu);
      target_step = 2 + c;
      seen = 0;
    }
    t0 = Clock::now();
    h.Report(worker_id, a, 2 + c);
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return seen == watchers; })) {
      Die("only " + std::to_string(seen) + " watchers saw change " + std::to_string(c));
    }
    all.push_back(MsSince(t0, last_seen));
    first_watcher.push_back(MsSince(t0, first_seen));
  }

  // Idle: 100 open streams, nothing changes.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  cpu0 = CpuSeconds();
  const Clock::time_point w0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));
  const double idle_cpu_watched = CpuSeconds() - cpu0;
  const double idle_wall = MsSince(w0) / 1000;

  // Shut down: cancelling the job ends every stream with its final snapshot.
  h.Cancel(job.id());
  for (std::thread& t : threads) t.join();
  if (ended_ok != watchers) {
    Die(std::to_string(watchers - ended_ok) + " watchers did not end with CANCELLED");
  }

  const Stats first_stats = Summarize(first_watcher);
  char extra[512];
  std::snprintf(extra, sizeof(extra),
                "\"watchers\":%d,\"first_watcher_p50_ms\":%.3f,\"first_watcher_p99_ms\":%.3f,"
                "\"measured\":\"ReportProgress sent -> the last of the watchers read the update "
                "(one job, %d streams)\"",
                watchers, first_stats.p50, first_stats.p99, watchers);
  PrintStats("watch_100_watchers", Summarize(all), extra);
  std::printf(
      "{\"bench\":\"watch_idle_cpu\",\"watchers\":%d,\"idle_seconds\":%.2f,"
      "\"cpu_ms_no_watchers\":%.1f,\"cpu_ms_with_watchers\":%.1f,"
      "\"cpu_fraction_of_one_core_with_watchers\":%.5f,"
      "\"measured\":\"getrusage(RUSAGE_SELF) over the idle period: the whole process "
      "(coordinator and the client streams)\"}\n",
      watchers, idle_wall, idle_cpu_none * 1000, idle_cpu_watched * 1000,
      idle_cpu_watched / idle_wall);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, scale = false;
  sbp::bench::ScaleOptions scale_options;
  for (int i = 1; i < argc; ++i) {
    auto number = [&](int* out) {
      if (i + 1 >= argc || std::atoi(argv[i + 1]) < 0) return false;
      *out = std::atoi(argv[++i]);
      return true;
    };
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--scale") == 0) {
      scale = true;
    } else if (!((std::strcmp(argv[i], "--jobs") == 0 && number(&scale_options.queued_jobs)) ||
                 (std::strcmp(argv[i], "--workers") == 0 && number(&scale_options.workers)) ||
                 (std::strcmp(argv[i], "--submits") == 0 && number(&scale_options.submits)) ||
                 (std::strcmp(argv[i], "--seconds") == 0 && number(&scale_options.seconds)) ||
                 (std::strcmp(argv[i], "--churn") == 0 && number(&scale_options.churn_workers)))) {
      std::fprintf(stderr,
                   "usage: %s [--quick] | --scale [--jobs N] [--workers N] [--submits N] "
                   "[--seconds S] [--churn N]\n",
                   argv[0]);
      return 2;
    }
  }
  if (std::getenv("SBP_LOG_LEVEL") == nullptr) sbp::SetLogLevel(sbp::LogLevel::kWarning);

  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("sbp_bench_control_plane_" + std::to_string(getpid()));
  std::filesystem::create_directories(root);
  if (scale) {
    scale_options.churn_workers = std::min(scale_options.churn_workers, scale_options.workers);
    scale_options.coordinator =
        (std::filesystem::canonical("/proc/self/exe").parent_path() / "sbp-coordinator").string();
    scale_options.dir = (root / "scale").string();
    const int rc = sbp::bench::RunControlPlaneScale(scale_options);
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
    return rc;
  }

  BenchSubmitToRunning(root, quick ? 10 : 50);
  BenchList(root, quick ? 1000 : 10000, quick ? 50 : 200);
  BenchWatch(root, 100, quick ? 10 : 20, quick ? 2 : 5);

  std::error_code ignored;
  std::filesystem::remove_all(root, ignored);
  return 0;
}
