#include "client/run_command.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli_common.h"
#include "client/coordinator_client.h"
#include "client/job_watch.h"
#include "client/run_resume.h"
#include "client/spec_overrides.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/compute_device.h"
#include "server/coordinator.h"
#include "worker/agent/system_info.h"
#include "worker/agent/worker_agent.h"
#include "worker/model/file_util.h"
#include "worker/train/job_spec.h"

namespace sbp::cli {
namespace {

namespace fs = std::filesystem;

// The signal that asked `sbp run` to stop (SIGINT: Ctrl-C; SIGTERM: timeout,
// systemd, docker stop, Slurm), 0 for none. Either cancels the job, which
// then ends as CANCELLED, and the embedded services shut down cleanly (the
// temporary state directory is removed); the same signal again quits at once.
std::atomic<int> g_interrupted{0};

void OnInterrupt(int signal) {
  g_interrupted = signal;
  std::signal(signal, SIG_DFL);
}

struct RunArgs {
  std::string spec_path;
  ResumeFlag resume;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  int workers = 0;                     // 0: the job's resources.world_size
  std::string state_dir;
  std::string device;              // "" = the job's resources.device (cpu, or cuda)
  std::string host_memory;         // per worker; "" = the machine's memory split evenly
  std::string offload_disk = "0";  // per worker; 0: no disk tier for `checkpoints: auto`
};

// What each local worker offers the memory tiers (see sbp-worker's flags).
struct LocalOffload {
  int64_t host_memory_bytes = 0;  // 0: the machine's memory split evenly
  int64_t offload_disk_bytes = 0;
};

// The device of local worker `i` for `--device`: cpu for all of them;
// "cuda" gives worker i cuda:i, "cuda:N" gives it cuda:N+i.
absl::StatusOr<Device> LocalWorkerDevice(const std::string& name, int i) {
  ASSIGN_OR_RETURN(Device device, ParseDeviceName(name));
  if (!device.is_cpu()) device.index += i;
  return device;
}

std::string RandomToken() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&token, "%08x", device());
  return token;
}

// The embedded coordinator's state directory: --state-dir, or a fresh
// temporary one that is removed on destruction.
class StateDir {
 public:
  static absl::StatusOr<StateDir> Open(const std::string& requested) {
    StateDir dir;
    if (!requested.empty()) {
      std::error_code ec;
      fs::create_directories(requested, ec);
      if (ec) {
        return absl::InvalidArgumentError(
            absl::StrCat("--state-dir ", requested, ": ", ec.message()));
      }
      dir.path_ = requested;
      return dir;
    }
    std::string pattern = (fs::temp_directory_path() / "sbp-run-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError("cannot create a temporary state directory");
    }
    dir.path_ = pattern;
    dir.temporary_ = true;
    return dir;
  }
  StateDir() = default;
  StateDir(StateDir&& other) noexcept
      : path_(std::move(other.path_)), temporary_(std::exchange(other.temporary_, false)) {}
  ~StateDir() {
    std::error_code ec;
    if (temporary_) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool temporary_ = false;
};

// N agents, each on its own thread; stopped and joined on destruction.
class LocalWorkers {
 public:
  absl::Status Start(int count, const std::string& device_name, const std::string& address,
                     const std::string& token, const LocalOffload& offload) {
    const int64_t host_memory = std::max<int64_t>(PhysicalMemoryBytes() / count, 1 << 20);
    // Training threads: OMP_NUM_THREADS when set, else the cores split between the workers
    // with one left for the control plane (spinning OpenMP teams that share a core with gRPC
    // threads slow down many times over).
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int threads =
        std::getenv("OMP_NUM_THREADS") != nullptr ? 0 : std::max(1, (cores - 1) / count);
    for (int i = 0; i < count; ++i) {
      AgentOptions options;
      options.coordinator = address;
      options.token = token;
      options.name = absl::StrCat("local-", i);
      ASSIGN_OR_RETURN(options.device, LocalWorkerDevice(device_name, i));
      options.memory_bytes = host_memory;
      // The memory tiers: each worker's share of the machine's memory (or
      // --host-memory), and no disk for `checkpoints: auto` unless given.
      options.host_memory_bytes =
          offload.host_memory_bytes > 0 ? offload.host_memory_bytes : host_memory;
      options.offload_disk_bytes = offload.offload_disk_bytes;
      if (!options.device.is_cpu()) {
        // A GPU worker's capacity: the device's free memory at start less
        // the stated reserve (kernels/compute_device.h).
        ASSIGN_OR_RETURN(options.memory_bytes, DeviceMemoryBudgetBytes(options.device));
      }
      options.work_dir = ".";
      options.confine_paths = false;  // the user's own paths, as for `sbp train`
      options.compute_threads = threads;
      options.allow_reward_programs = true;  // the user's own machine and job
      absl::StatusOr<std::unique_ptr<WorkerAgent>> agent = WorkerAgent::Create(options);
      if (!agent.ok()) return agent.status();
      agents_.push_back(*std::move(agent));
    }
    for (auto& agent : agents_) {
      WorkerAgent* a = agent.get();
      threads_.emplace_back([a] {
        const absl::Status status = a->Run();
        if (!status.ok()) LOG(ERROR) << "worker " << a->options().name << ": " << status;
      });
    }
    return absl::OkStatus();
  }
  ~LocalWorkers() {
    for (auto& agent : agents_) agent->Stop();
    for (std::thread& t : threads_) t.join();
  }
  int64_t memory_each() const {
    return agents_.empty() ? 0 : agents_.front()->options().memory_bytes;
  }

 private:
  std::vector<std::unique_ptr<WorkerAgent>> agents_;
  std::vector<std::thread> threads_;
};

// Cancels the job once when Ctrl-C was pressed; stops with the watch.
class InterruptCanceller {
 public:
  InterruptCanceller(CoordinatorClient& client, std::string id)
      : thread_([this, &client, id = std::move(id)] {
          while (!done_) {
            if (const int signal = g_interrupted.load(); signal != 0) {
              const char* what =
                  signal == SIGTERM ? "terminated (SIGTERM)" : "interrupted (Ctrl-C)";
              std::fprintf(stderr,
                           "\nsbp run: %s; cancelling job %s (the same signal again quits at "
                           "once)\n",
                           what, id.c_str());
              absl::StatusOr<streambp::v1::Job> job = client.Cancel(id, what);
              if (!job.ok()) {
                std::fprintf(stderr, "sbp run: %s\n", std::string(job.status().message()).c_str());
              }
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        }) {}
  ~InterruptCanceller() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

int RunJob(const RunArgs& args) {
  if (args.workers < 0) {
    return ReportError("run",
                       absl::InvalidArgumentError(
                           "--workers: must be at least 1 (or left out: the job's world size)"));
  }
  absl::StatusOr<std::string> spec = ReadJobSpecWithOverrides(args.spec_path, args.overrides);
  if (!spec.ok()) return ReportError("run", spec.status());
  absl::StatusOr<JobSpec> parsed =
      ParseJobSpec(*spec, SpecSourceName(args.spec_path, args.overrides));
  if (!parsed.ok()) return ReportError("run", parsed.status());
  // --resume continues a run in this directory in place (the embedded
  // coordinator's jobs live only as long as this process; runs stay on disk).
  std::string not_resumed;
  if (args.resume.given) {
    absl::StatusOr<std::string> run_dir = LocalRunToResume(*parsed, args.resume, ".");
    if (!run_dir.ok()) return ReportError("run", run_dir.status());
    absl::StatusOr<std::string> continuing = SpecContinuingRun(*spec, *run_dir);
    if (!continuing.ok()) return ReportError("run", continuing.status());
    spec = *std::move(continuing);
    std::fprintf(stderr, "sbp run: continuing %s\n", DescribeRun(*run_dir).c_str());
  } else if (parsed->resume_from.empty()) {
    not_resumed = NewestLocalRun(".", parsed->name).value_or("");
  }
  std::string device = args.device;
  if (device.empty()) device = std::string(DeviceKindName(parsed->resources.device));
  // As many local workers as the job has ranks unless asked for more: with
  // fewer it could never be scheduled, and would wait for ever.
  const int64_t world_size = parsed->resources.world_size;
  const int worker_count = args.workers > 0 ? args.workers : static_cast<int>(world_size);
  if (worker_count < world_size) {
    return ReportError("run", absl::InvalidArgumentError(absl::StrCat(
                                  "--workers ", worker_count, ": the job needs ", world_size,
                                  " workers (resources.world_size); start at least that many "
                                  "(or leave --workers out)")));
  }
  LocalOffload offload;
  if (!args.host_memory.empty()) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(args.host_memory);
    if (!bytes.ok() || *bytes <= 0) {
      return ReportError("run", absl::InvalidArgumentError(absl::StrCat(
                                    "--host-memory: expected a positive size like 64GiB (got ",
                                    args.host_memory, ")")));
    }
    offload.host_memory_bytes = *bytes;
  }
  if (absl::StatusOr<int64_t> bytes = ParseByteSize(args.offload_disk); !bytes.ok() || *bytes < 0) {
    return ReportError("run", absl::InvalidArgumentError(
                                  absl::StrCat("--offload-disk: expected a size like 200GiB, or 0 "
                                               "(got ",
                                               args.offload_disk, ")")));
  } else {
    offload.offload_disk_bytes = *bytes;
  }
  // The embedded services log only warnings unless SBP_LOG_LEVEL says otherwise.
  if (std::getenv("SBP_LOG_LEVEL") == nullptr) SetLogLevel(LogLevel::kWarning);

  absl::StatusOr<StateDir> state = StateDir::Open(args.state_dir);
  if (!state.ok()) return ReportError("run", state.status());
  server::CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.db_path = (fs::path(state->path()) / "coordinator.db").string();
  options.client_token = RandomToken();
  options.worker_token = RandomToken();
  options.work_dir = ".";  // where the local workers resolve the spec's paths
  options.confine_paths = false;
  absl::StatusOr<std::unique_ptr<server::Coordinator>> coordinator =
      server::Coordinator::Start(options);
  if (!coordinator.ok()) return ReportError("run", coordinator.status());
  const std::string address = (*coordinator)->address();

  int code = kExitOk;
  {
    LocalWorkers workers;
    if (absl::Status s =
            workers.Start(worker_count, device, address, options.worker_token, offload);
        !s.ok()) {
      return ReportError("run", s);
    }
    std::fprintf(stderr,
                 "sbp run: embedded coordinator on %s (state in %s), %d local worker%s "
                 "with %s each\n",
                 address.c_str(), state->path().c_str(), worker_count, worker_count == 1 ? "" : "s",
                 FormatByteSize(workers.memory_each()).c_str());
    absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
        CoordinatorClient::Connect(address, options.client_token, "");
    if (!client.ok()) return ReportError("run", client.status());
    // Admission compares the job with the registered workers: let them
    // register first, so that a job they cannot hold is refused at once
    // instead of waiting for ever.
    const absl::Time registered_by = absl::Now() + absl::Seconds(30);
    while (absl::Now() < registered_by) {
      absl::StatusOr<streambp::v1::ListWorkersResponse> listed = (*client)->ListWorkers();
      if (listed.ok() && listed->workers_size() >= worker_count) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    absl::StatusOr<streambp::v1::SubmitJobResponse> submitted =
        (*client)->Submit(*spec, NewRequestId());
    if (!submitted.ok()) {
      code = ReportRpcError("run", submitted.status());
      if (code != kExitBadInput &&
          submitted.status().code() == absl::StatusCode::kResourceExhausted) {
        code = kExitBadInput;  // the job cannot fit on these workers
      }
    } else {
      if (!not_resumed.empty()) {
        std::fprintf(stderr, "sbp run: a new run in %s; not resuming %s: --resume continues it\n",
                     submitted->job().run_dir().c_str(), DescribeRun(not_resumed).c_str());
      }
      g_interrupted = 0;
      std::signal(SIGINT, OnInterrupt);
      std::signal(SIGTERM, OnInterrupt);
      InterruptCanceller canceller(**client, submitted->job().id());
      code = WatchJob(**client, submitted->job().id(), "run");
    }
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
  (*coordinator)->Shutdown();
  // Stopped by a signal: the shell's convention (130 Ctrl-C, 143 SIGTERM),
  // after the job was cancelled with a checkpoint.
  if (const int signal = g_interrupted.load(); signal != 0) return 128 + signal;
  return code;
}

}  // namespace

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand(
      "run", "run a job on an embedded coordinator with local workers (no setup needed)");
  run->add_option("job", args->spec_path, "job spec (YAML)");
  CLI::Option* resume = AddResumeOption(*run, args->resume);
  AddSetOption(*run, args->overrides);
  run->add_option("--workers", args->workers,
                  "local workers to start (default: the job's resources.world_size)");
  run->add_option("--device", args->device,
                  "the local workers' device: cpu, cuda (worker i on cuda:i) or cuda:N "
                  "(default: the job's resources.device)");
  run->add_option("--host-memory", args->host_memory,
                  "host memory each local worker offers the memory tiers (offloaded layer "
                  "checkpoints, optimizer state; default: the machine's memory split evenly)");
  run->add_option("--offload-disk", args->offload_disk,
                  "local disk each worker lets `checkpoints: auto` fill with the disk tier "
                  "(0: none; `checkpoints: disk` runs anyway, bounded by the disk)")
      ->capture_default_str();
  run->add_option("--state-dir", args->state_dir,
                  "keep the coordinator's SQLite state here (default: a temporary directory)");
  run->callback([args, exit_code, resume] {
    if (absl::Status s = TakeResumeFlag(*resume, args->resume, args->spec_path); !s.ok()) {
      *exit_code = ReportError("run", s);
      return;
    }
    *exit_code = RunJob(*args);
  });
}

}  // namespace sbp::cli
