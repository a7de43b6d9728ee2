// sbp-bench-all-to-all: bandwidth of the all-to-all of sequence parallelism
// (Communicator::AllToAll) between rank processes on this machine, through
// the communicator a worker would use for the device: Gloo over loopback on
// the CPU (--ranks processes, default 2), NCCL on CUDA (one rank per visible
// device; NCCL takes no two ranks on one device). The ranks meet through a
// rendezvous directory.
//
// Each rank prints one JSON line per size, as soon as it is measured:
//   {"op": "all_to_all", "impl": "gloo" | "nccl", "device", "world_size",
//    "rank", "bytes", "block_bytes", "seconds", "median_seconds", "gb_per_s",
//    "bus_gb_per_s", "repeats"}
// "bytes" is one rank's whole send buffer (world_size blocks), "seconds" the
// best of --repeats timed calls after --warmup untimed ones, each started
// right after a barrier; gb_per_s = bytes / seconds (1e9 bytes), and
// bus_gb_per_s counts only what leaves the rank, (world_size - 1) / world_size
// of it (nccl-tests' convention). The first call's data are checked: a wrong
// byte, like a failed call, makes the program exit non-zero.
//
//   sbp-bench-all-to-all --device cpu --ranks 2
//   sbp-bench-all-to-all --device cuda --sizes 1048576,67108864,536870912
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/compute_device.h"
#include "kernels/device_info.h"
#include "kernels/tensor.h"
#include "nlohmann/json.hpp"
#include "worker/dist/connect.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string device = "cpu";
  int ranks = 2;  // CPU only; CUDA: one per visible device
  std::vector<int64_t> sizes = {64 << 10, 1 << 20, 16 << 20};
  int warmup = 1;
  int repeats = 5;
  int timeout_seconds = 120;
};

unsigned char Pattern(int src, int dst, int64_t i) {
  return static_cast<unsigned char>((src * 131 + dst * 31 + i * 7) % 251);
}

absl::Status RunRank(const Options& o, const std::string& dir, int rank, int n) {
  const bool cuda = o.device != "cpu";
  const std::string name = cuda ? absl::StrCat("cuda:", rank) : "cpu";
  ASSIGN_OR_RETURN(const Device device, ParseDeviceName(name));
  ASSIGN_OR_RETURN(ComputeDevice compute, OpenComputeDevice(name, DefaultActivationDType(device)));
  Backend& backend = *compute.backend;
  CollectiveOptions collective;
  collective.rank = rank;
  collective.world_size = n;
  collective.timeout = std::chrono::seconds(o.timeout_seconds);
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                   ConnectThroughDirectory(dir, backend, collective));
  CpuAllocator host;
  for (int64_t size : o.sizes) {
    const int64_t block = std::max<int64_t>(size / n, 1), bytes = block * n;
    // Whole floats in the device's memory (the allocator's element types).
    const int64_t floats = (bytes + 3) / 4;
    ASSIGN_OR_RETURN(Tensor send, Tensor::Empty(*compute.allocator, {floats}, DType::kF32, "send"));
    ASSIGN_OR_RETURN(Tensor recv, Tensor::Empty(*compute.allocator, {floats}, DType::kF32, "recv"));
    ASSIGN_OR_RETURN(Tensor staging, Tensor::Empty(host, {floats}, DType::kF32, "staging"));
    auto* out = static_cast<unsigned char*>(staging.raw_data());
    for (int j = 0; j < n; ++j) {
      for (int64_t i = 0; i < block; ++i) out[j * block + i] = Pattern(rank, j, i);
    }
    backend.Copy(staging, send);
    backend.Synchronize();
    std::vector<double> times;
    for (int call = 0; call < o.warmup + o.repeats; ++call) {
      RETURN_IF_ERROR(comm->Barrier());
      const auto start = Clock::now();
      RETURN_IF_ERROR(comm->AllToAll(send.raw_data(), recv.raw_data(), block));
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (call >= o.warmup) times.push_back(seconds);
      if (call == 0) {
        backend.Copy(recv, staging);
        backend.Synchronize();
        for (int j = 0; j < n; ++j) {
          for (int64_t i = 0; i < block; ++i) {
            if (out[j * block + i] != Pattern(j, rank, i)) {
              return absl::DataLossError(absl::StrCat("rank ", rank, ": all-to-all of ", bytes,
                                                      " bytes: block ", j, " byte ", i,
                                                      " is wrong"));
            }
          }
        }
      }
    }
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    const double best = sorted.empty() ? 0 : sorted.front();
    const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
    const double gbps = best > 0 ? static_cast<double>(bytes) / best / 1e9 : 0;
    const nlohmann::json line = {{"op", "all_to_all"},
                                 {"impl", cuda ? "nccl" : "gloo"},
                                 {"device", DeviceName(backend.device())},
                                 {"world_size", n},
                                 {"rank", rank},
                                 {"bytes", bytes},
                                 {"block_bytes", block},
                                 {"seconds", best},
                                 {"median_seconds", median},
                                 {"gb_per_s", gbps},
                                 {"bus_gb_per_s", gbps * (n - 1) / n},
                                 {"repeats", o.repeats}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// Forks `n` rank processes and waits for them; the number that failed.
int RunRanks(const Options& o, const std::string& dir, int n) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      const absl::Status s = RunRank(o, dir, rank, n);
      if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(s.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  return failures;
}

// CUDA cannot be used in a child forked after the parent initialised it:
// the devices are counted in a child of their own.
int CountCudaDevicesInChild() {
  const pid_t pid = fork();
  if (pid == 0) _exit(std::min(CudaDeviceCount(), 64));
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"sbp-bench-all-to-all: all-to-all bandwidth between local rank processes"};
  Options o;
  app.add_option("--device", o.device, "cpu (Gloo) or cuda (NCCL, one rank per device)")
      ->capture_default_str();
  app.add_option("--ranks", o.ranks, "rank processes on the CPU")->capture_default_str();
  app.add_option("--sizes", o.sizes, "bytes of one rank's send buffer")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--warmup", o.warmup)->capture_default_str();
  app.add_option("--repeats", o.repeats)->capture_default_str();
  app.add_option("--timeout", o.timeout_seconds, "seconds for the rendezvous and each call")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.device != "cpu" && o.device != "cuda") {
    std::fprintf(stderr, "--device: cpu or cuda, not '%s'\n", o.device.c_str());
    return 2;
  }
  if (o.ranks < 1 || o.warmup < 0 || o.repeats < 1) {
    std::fprintf(stderr, "--ranks and --repeats must be at least 1, --warmup at least 0\n");
    return 2;
  }
  int n = o.ranks;
  if (o.device == "cuda") {
    n = CountCudaDevicesInChild();
    if (n == 0) {
      std::fprintf(stderr, "no CUDA device (or no CUDA in this build)\n");
      return 1;
    }
  }
  char pattern[] = "/tmp/sbp-bench-all-to-all-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  const int failures = RunRanks(o, pattern, n);
  std::error_code ec;
  fs::remove_all(pattern, ec);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace sbp

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  return sbp::Main(argc, argv);
}
