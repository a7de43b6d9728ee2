// ZeRO-2 scaling on one machine: for world sizes 1, 2 and 4, N rank
// processes (fork) connected by Gloo over loopback train the same SFT job
// (global batch of `--sequences` sequences of `--seq-len` tokens, StreamBP)
// and each rank prints one JSON line: its allocator peak, the median step
// time, and the share of the step it waited on collectives. With
// --sequence-parallel the N ranks form one sequence group (P = N: each
// holds 1/N of every sequence) and the lines add the all-to-all time and
// bytes per step.
//
//   sbp-bench-zero2 [--preset bench-qwen3] [--seq-len 1024] [--sequences 4]
//                   [--steps 3] [--world-sizes 1,2,4] [--threads 1]
//                   [--sequence-parallel]
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/openblas_core.h"
#include "kernels/random.h"
#include "nlohmann/json.hpp"
#include "worker/dist/connect.h"
#include "worker/model/model_io.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string preset = "bench-qwen3";
  int64_t seq_len = 1024;
  int sequences = 4;
  int steps = 3;
  std::vector<int> world_sizes = {1, 2, 4};
  int threads = 1;
  bool sequence_parallel = false;
};

// Step figures of one rank; the first step (warm-up) is left out.
class StepCollector final : public TrainingObserver {
 public:
  void OnStep(const StepReport& r) override {
    if (r.step == 1) return;
    seconds.push_back(r.step_seconds);
    waits.push_back(r.extra.value("comm_wait_seconds", 0.0));
    exchange_seconds.push_back(r.extra.value("all_to_all_seconds", 0.0));
    exchange_bytes.push_back(r.extra.value("all_to_all_bytes", 0.0));
    peak = r.peak_bytes;
  }
  std::vector<double> seconds, waits, exchange_seconds, exchange_bytes;
  int64_t peak = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int RunRank(const Args& a, const std::string& root, int world_size, int rank) {
  omp_set_num_threads(a.threads);
  JobSpec spec;
  spec.name = "bench-zero2";
  spec.model = root + "/model";
  spec.data = root + "/data.jsonl";
  spec.objective = Objective::kSft;
  spec.seq_len = a.seq_len;
  spec.streambp = {BackwardMode::kStream, 0, 0};
  spec.train.steps = a.steps;
  spec.train.sequences_per_step = a.sequences;
  spec.train.micro_batch_sequences = 1;
  spec.train.lr = 1e-5;
  spec.checkpoint.dir = absl::StrCat(root, "/runs/world-", world_size);
  spec.checkpoint.every_steps = 0;
  spec.resources.world_size = world_size;
  const int group = a.sequence_parallel ? world_size : 1;
  spec.resources.sequence_parallel = group;
  TrainOptions options;
  options.resume = false;
  const std::string rendezvous = absl::StrCat(root, "/rendezvous-", world_size);
  options.connect = [&](Backend& backend) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    CollectiveOptions collective;
    collective.rank = rank;
    collective.world_size = world_size;
    collective.timeout = std::chrono::seconds(600);
    return ConnectThroughDirectory(rendezvous, backend, collective);
  };
  options.connect_sequence_group = [&](Backend& backend, int group_size) {
    CollectiveOptions collective;
    collective.rank = rank;
    collective.world_size = world_size;
    collective.timeout = std::chrono::seconds(600);
    return ConnectSequenceGroupThroughDirectory(rendezvous, backend, collective, group_size);
  };
  StepCollector steps;
  auto summary = RunTraining(spec, options, &steps);
  if (!summary.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, summary.status().ToString().c_str());
    return 1;
  }
  const double step = Median(steps.seconds), wait = Median(steps.waits);
  const double exchange = Median(steps.exchange_seconds);
  const nlohmann::json line = {{"world_size", world_size},
                               {"sequence_parallel", group},
                               {"rank", rank},
                               {"preset", a.preset},
                               {"seq_len", a.seq_len},
                               {"global_sequences", a.sequences},
                               {"peak_bytes", summary->peak_bytes},
                               {"step_seconds", step},
                               {"comm_wait_seconds", wait},
                               {"comm_wait_share", step > 0 ? wait / step : 0.0},
                               {"all_to_all_seconds", exchange},
                               {"all_to_all_share", step > 0 ? exchange / step : 0.0},
                               {"all_to_all_bytes", Median(steps.exchange_bytes)},
                               {"tokens_per_second", a.sequences * a.seq_len / step}};
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "sbp-bench-zero2: ZeRO-2 (and sequence-parallel) memory and step time for 1, 2, 4 ranks"};
  Args a;
  app.add_option("--preset", a.preset)->capture_default_str();
  app.add_option("--seq-len", a.seq_len)->capture_default_str();
  app.add_option("--sequences", a.sequences, "global batch (sequences per step)")
      ->capture_default_str();
  app.add_option("--steps", a.steps)->capture_default_str();
  app.add_option("--world-sizes", a.world_sizes)->delimiter(',')->capture_default_str();
  app.add_option("--threads", a.threads, "compute threads per rank")->capture_default_str();
  app.add_flag("--sequence-parallel", a.sequence_parallel,
               "each world is one sequence group (P = world size)");
  CLI11_PARSE(app, argc, argv);

  char pattern[] = "/tmp/sbp-bench-zero2-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  const std::string root = pattern;
  {
    auto config = PresetConfig(a.preset);
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
      return 2;
    }
    CpuAllocator allocator;
    auto weights = InitModelWeights(*config, 1, allocator);
    if (!weights.ok() || !SaveModelDirectory(root + "/model", *weights, DType::kF32).ok()) {
      return 1;
    }
    std::ofstream data(root + "/data.jsonl");
    for (int i = 0; i < a.sequences; ++i) {
      std::vector<int32_t> ids(a.seq_len);
      Tensor t = Tensor::Wrap(ids.data(), {a.seq_len}, DType::kI32);
      FillIntegers(t, 10 + i, 0, static_cast<int32_t>(config->vocab_size));
      data << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
    }
  }
  int failures = 0;
  for (int n : a.world_sizes) {
    fs::create_directories(absl::StrCat(root, "/rendezvous-", n));
    std::vector<pid_t> pids;
    for (int rank = 0; rank < n; ++rank) {
      const pid_t pid = fork();
      if (pid == 0) _exit(RunRank(a, root, n, rank));
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace sbp

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  sbp::cpu::PrepareOpenBlas(argv);
  return sbp::Main(argc, argv);
}
