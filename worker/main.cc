// sbp-worker: registers this machine with a coordinator and runs the training
// jobs it is assigned until SIGTERM/SIGINT.
//
// On SIGTERM/SIGINT a running job finishes its current step, writes a
// checkpoint and reports it; the process then exits 0 without reporting an
// outcome, so when the worker's lease expires the coordinator retries the job
// (LOST_WORKER) on another worker from that checkpoint, recomputing nothing.
// A second signal exits at once. Exit codes: 0 clean stop, 1 the
// coordinator rejected the worker (e.g. a bad token), 2 bad flags.
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/bearer_token.h"
#include "common/byte_size.h"
#include "common/input_limits.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "kernels/compute_device.h"
#include "kernels/cpu/blas_info.h"
#include "kernels/cpu/openblas_core.h"
#include "kernels/device_info.h"
#include "worker/agent/system_info.h"
#include "worker/agent/worker_agent.h"
#include "worker/model/file_util.h"

namespace sbp {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct Flags {
  std::string coordinator = "127.0.0.1:7700";
  std::string device = "cpu";
  std::string memory;
  std::string host_memory;
  std::string offload_disk = "0";
  std::string work_dir = ".";
  std::string shared_dir;
  std::string metrics_listen;
  std::string token_file;
  std::string name;
  std::string tls_ca;
  int threads = 0;
  std::string collective_host = "127.0.0.1";
  double collective_timeout_seconds = 60;
  bool allow_reward_programs = false;
};

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "sbp-worker: %s\n", message.c_str());
  return code;
}

// "cpu", "cuda" or "cuda:N" (ParseDeviceName), a device this build and
// machine have; errors name the flag.
absl::StatusOr<Device> ParseDeviceFlag(const std::string& text) {
  absl::StatusOr<Device> device = ParseDeviceName(text);
  if (!device.ok())
    return absl::InvalidArgumentError(absl::StrCat("--device: ", device.status().message()));
  if (device->is_cpu()) return device;
  if (!kCudaCompiled) {
    return absl::InvalidArgumentError("--device: this build has no CUDA backend; use --device cpu");
  }
  if (device->index >= CudaDeviceCount()) {
    return absl::InvalidArgumentError(absl::StrCat("--device: no CUDA device ", device->index, " (",
                                                   CudaDeviceCount(), " visible)"));
  }
  return device;
}

absl::StatusOr<AgentOptions> BuildOptions(const Flags& flags) {
  AgentOptions options;
  options.coordinator = flags.coordinator;
  options.name = flags.name.empty() ? DefaultWorkerName() : flags.name;
  // Shown to every user by `sbp workers`; the coordinator refuses others too.
  if (options.name.size() > 128 || !IsPrintableAscii(options.name)) {
    return absl::InvalidArgumentError(
        "--name: must be at most 128 characters of printable ASCII (no control characters)");
  }
  options.work_dir = flags.work_dir;
  options.shared_dir = flags.shared_dir;
  options.metrics_listen = flags.metrics_listen;
  options.tls_ca_path = flags.tls_ca;
  if (flags.threads < 0) return absl::InvalidArgumentError("--threads: must be >= 0");
  options.compute_threads = flags.threads;
  if (flags.collective_host.empty()) {
    return absl::InvalidArgumentError("--collective-host: must name this host's address");
  }
  options.collective_host = flags.collective_host;
  if (!(flags.collective_timeout_seconds > 0)) {
    return absl::InvalidArgumentError("--collective-timeout: must be a positive number of seconds");
  }
  options.collective_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(flags.collective_timeout_seconds * 1000));
  options.allow_reward_programs = flags.allow_reward_programs;
  auto device = ParseDeviceFlag(flags.device);
  if (!device.ok()) return device.status();
  options.device = *device;
  if (flags.memory.empty() && !options.device.is_cpu()) {
    // A GPU worker advertises what its allocator may use: the device's free
    // memory at start less a stated reserve (kernels/compute_device.h).
    auto bytes = DeviceMemoryBudgetBytes(options.device);
    if (!bytes.ok()) return bytes.status();
    options.memory_bytes = *bytes;
  } else if (flags.memory.empty()) {
    options.memory_bytes = PhysicalMemoryBytes();
  } else {
    auto bytes = ParseByteSize(flags.memory);
    if (!bytes.ok() || *bytes <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory: expected a positive size like 8GiB (got ", flags.memory, ")"));
    }
    options.memory_bytes = *bytes;
  }
  // The memory tiers: host memory for offloaded state (default: the
  // machine's, or the container's limit when smaller), and the local disk
  // `checkpoints: auto` may fill (default none; an explicit disk tier is
  // bounded by the disk itself).
  if (flags.host_memory.empty()) {
    options.host_memory_bytes = HostMemoryLimitBytes();
  } else {
    auto bytes = ParseByteSize(flags.host_memory);
    if (!bytes.ok() || *bytes <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--host-memory: expected a positive size like 64GiB (got ", flags.host_memory, ")"));
    }
    options.host_memory_bytes = *bytes;
  }
  {
    auto bytes = ParseByteSize(flags.offload_disk);
    if (!bytes.ok() || *bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--offload-disk: expected a size like 200GiB, or 0 (got ", flags.offload_disk, ")"));
    }
    options.offload_disk_bytes = *bytes;
  }
  if (!flags.token_file.empty()) {
    auto token = ReadBearerTokenFile(flags.token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: ", token.status().message()));
    }
    options.token = *std::move(token);
  } else if (const char* env = std::getenv("SBP_TOKEN");
             env != nullptr && !absl::StripAsciiWhitespace(env).empty()) {
    ASSIGN_OR_RETURN(options.token, ParseBearerToken(env, "$SBP_TOKEN"));
  }
  return options;
}

// Waits for SIGTERM/SIGINT (blocked in every thread) and stops the agent; a
// second signal ends the process at once.
void WatchSignals(WorkerAgent* agent) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int signal = 0;
  if (sigwait(&set, &signal) != 0) return;
  std::fprintf(stderr, "sbp-worker: %s received, stopping after the current step\n",
               strsignal(signal));
  agent->Stop();
  if (sigwait(&set, &signal) == 0) std::_Exit(kExitFailed);
}

int Main(int argc, char** argv) {
  CLI::App app{"sbp-worker: runs StreamBP training jobs for a coordinator"};
  app.set_version_flag("--version", [] {
    return std::string("sbp-worker ") + kVersion + "\n" + CudaSupportSummary();
  });
  Flags flags;
  app.add_option("--coordinator", flags.coordinator, "coordinator address host:port")
      ->envname("SBP_COORDINATOR")
      ->capture_default_str();
  app.add_option("--device", flags.device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--memory", flags.memory,
                 "memory to advertise and enforce as the budget, e.g. 8GiB "
                 "(default: the machine's physical memory, or the GPU's with --device cuda:N)");
  app.add_option("--host-memory", flags.host_memory,
                 "host memory the memory tiers may use for offloaded layer checkpoints and "
                 "optimizer state, e.g. 256GiB (default: the machine's physical memory, or the "
                 "container's memory limit when smaller)");
  app.add_option("--offload-disk", flags.offload_disk,
                 "local disk `checkpoints: auto` may fill with the disk tier, e.g. 500GiB "
                 "(0: none; a job asking for `checkpoints: disk` still runs, bounded by the disk)")
      ->capture_default_str();
  app.add_option("--work-dir", flags.work_dir, "relative paths in job specs resolve here")
      ->capture_default_str();
  app.add_option("--shared-dir", flags.shared_dir,
                 "a read-only directory job models and data may also come from");
  app.add_option("--metrics-listen", flags.metrics_listen, "serve /metrics on host:port");
  app.add_option("--token-file", flags.token_file,
                 "file with the worker bearer token (default: $SBP_TOKEN)");
  app.add_option("--name", flags.name, "name shown by `sbp workers` (default: hostname-pid)");
  app.add_option("--tls-ca", flags.tls_ca, "PEM roots: connect with TLS");
  app.add_option("--threads", flags.threads,
                 "training threads (default: OMP_NUM_THREADS or one per core)");
  app.add_option("--collective-host", flags.collective_host,
                 "address the other ranks of a multi-worker job reach this worker at "
                 "(e.g. the pod IP)")
      ->envname("SBP_COLLECTIVE_HOST")
      ->capture_default_str();
  app.add_option("--collective-timeout", flags.collective_timeout_seconds,
                 "seconds a collective may wait for a peer before the attempt fails")
      ->capture_default_str();
  app.add_flag("--allow-reward-programs", flags.allow_reward_programs,
               "let online GRPO jobs run their reward program (grpo.reward.command) as this "
               "worker's user, in the job's run directory");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  absl::StatusOr<AgentOptions> options = BuildOptions(flags);
  if (!options.ok()) return Fail(kExitUsage, std::string(options.status().message()));

  // Signals are taken by one thread with sigwait; every thread started later inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto agent = WorkerAgent::Create(*options);
  if (!agent.ok()) return Fail(kExitUsage, std::string(agent.status().message()));
  std::thread(WatchSignals, agent->get()).detach();
  const std::string tiers = absl::StrCat(
      options->host_memory_bytes > 0
          ? absl::StrCat(", host memory ", FormatByteSize(options->host_memory_bytes))
          : std::string(),
      options->offload_disk_bytes > 0
          ? absl::StrCat(", offload disk ", FormatByteSize(options->offload_disk_bytes))
          : std::string());
  std::fprintf(
      stderr, "sbp-worker %s: %s, %s%s, coordinator %s%s%s\n", kVersion, options->name.c_str(),
      FormatByteSize(options->memory_bytes).c_str(), tiers.c_str(), options->coordinator.c_str(),
      (*agent)->metrics_address().empty() ? "" : ", metrics ", (*agent)->metrics_address().c_str());
  std::fprintf(stderr, "sbp-worker: blas %s\n", cpu::BlasSummary().c_str());
  const absl::Status status = (*agent)->Run();
  if (!status.ok()) return Fail(kExitFailed, std::string(status.message()));
  return kExitOk;
}

}  // namespace
}  // namespace sbp

int main(int argc, char** argv) {
  sbp::cpu::PrepareOpenBlas(argv);
  return sbp::Main(argc, argv);
}
