// ZeRO-2 with optimizer offload: each rank keeps its owned shards (gradient,
// masters, AdamW moments) in host memory and updates them on the CPU. Two
// rank processes (Gloo over loopback) train bit for bit like two ranks with
// the shards on the device: the same weights, the same optimizer shard files,
// the same gradient norms, for full fine-tuning (shared or separate masters)
// and LoRA.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/dist/connect.h"
#include "worker/dist/zero2_state.h"
#include "worker/engine/device_store.h"
#include "worker/engine/lora_store.h"
#include "worker/model/file_util.h"
#include "worker/train/checkpoint.h"
#include "worker/train/checkpoint_layout.h"
#include "worker/train/sharded_checkpoint.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

// `name` inside a checkpoint's trainer_state/.
std::string StateFile(const std::string& name) {
  return std::string(kTrainerStateDir) + "/" + name;
}

struct Case {
  const char* name;
  bool separate_master;
  bool lora;
};

class Zero2OffloadBase : public train_testing::TrainerFixture {
 protected:
  // Trains `spec` on two rank processes (stopping after `stop_after_step`
  // when > 0); returns whether both succeeded.
  bool RunTwoRanks(const JobSpec& spec, bool separate_master, int64_t stop_after_step = 0) {
    const std::string rendezvous =
        (root_ / absl::StrCat("rendezvous-", spec.name, "-", ++runs_)).string();
    fs::create_directories(rendezvous);
    const std::vector<int> codes = dist_testing::RunRankProcesses(2, [&](int rank) {
      TrainOptions options;
      options.separate_master = separate_master;
      options.stop_after_step = stop_after_step;
      options.connect = [&](Backend& backend) {
        return ConnectThroughDirectory(rendezvous, backend, {rank, 2});
      };
      auto summary = RunTraining(spec, options, nullptr);
      if (!summary.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, summary.status().ToString().c_str());
      }
      return summary.ok() ? 0 : 1;
    });
    return codes == std::vector<int>({0, 0});
  }
  static std::string ReadFile(const std::string& path) {
    auto bytes = ReadFileToString(path);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? *bytes : "";
  }
  int runs_ = 0;
};

class Zero2OffloadTest : public Zero2OffloadBase, public ::testing::WithParamInterface<Case> {};
using Zero2OffloadRunTest = Zero2OffloadBase;

TEST_P(Zero2OffloadTest, TrainsBitForBitLikeShardsOnTheDevice) {
  const Case c = GetParam();
  std::vector<JobSpec> runs;
  for (bool offload : {false, true}) {
    JobSpec spec = Spec(absl::StrCat(c.name, offload ? "-offload" : "-device"));
    spec.train.steps = 4;
    spec.train.optimizer_offload = offload;
    spec.resources.world_size = 2;
    if (c.lora) {
      spec.lora.r = 4;
      spec.lora.alpha = 8;
      spec.lora.target_modules = LoraModuleNames();
      spec.lora.init_seed = 5;
    }
    ASSERT_TRUE(RunTwoRanks(spec, c.separate_master)) << spec.name;
    runs.push_back(spec);
  }
  const std::string a = CheckpointPath(runs[0].checkpoint.dir, 4);
  const std::string b = CheckpointPath(runs[1].checkpoint.dir, 4);
  std::vector<std::string> files = {StateFile(OptimizerShardFileName(0, 2)),
                                    StateFile(OptimizerShardFileName(1, 2))};
  files.push_back(c.lora ? "adapter_model.safetensors" : "model.safetensors");
  for (const std::string& file : files) {
    const std::string x = ReadFile(a + "/" + file), y = ReadFile(b + "/" + file);
    EXPECT_FALSE(x.empty()) << file;
    EXPECT_TRUE(x == y) << file << " differs";
  }
  const auto x = Metrics(runs[0]), y = Metrics(runs[1]);
  ASSERT_EQ(x.size(), 4u);
  ASSERT_EQ(y.size(), 4u);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i]["loss"], y[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(x[i]["grad_norm"], y[i]["grad_norm"]) << "step " << i + 1;
  }
}

// A resumed offloaded ZeRO-2 run ends like the uninterrupted one.
TEST_F(Zero2OffloadRunTest, ResumeIsBitIdentical) {
  auto spec = [&](const std::string& name) {
    JobSpec s = Spec(name);
    s.train.steps = 6;
    s.checkpoint.every_steps = 3;
    s.train.optimizer_offload = true;
    s.resources.world_size = 2;
    return s;
  };
  const JobSpec straight = spec("straight");
  ASSERT_TRUE(RunTwoRanks(straight, false));
  const JobSpec interrupted = spec("interrupted");
  ASSERT_TRUE(RunTwoRanks(interrupted, false, /*stop_after_step=*/4));
  ASSERT_TRUE(RunTwoRanks(interrupted, false));
  const std::string a = CheckpointPath(straight.checkpoint.dir, 6);
  const std::string b = CheckpointPath(interrupted.checkpoint.dir, 6);
  for (const std::string& file :
       {StateFile(OptimizerShardFileName(0, 2)), StateFile(OptimizerShardFileName(1, 2)),
        std::string("model.safetensors")}) {
    EXPECT_TRUE(ReadFile(a + "/" + file) == ReadFile(b + "/" + file)) << file << " differs";
  }
}

// Where the shards live: with offload every owned shard (gradient, moments,
// masters) comes from the host allocator and the device holds none of them.
TEST_F(Zero2OffloadRunTest, OwnedShardsLiveInHostMemory) {
  CpuAllocator staging;
  auto initial = ParameterStore::Load((root_ / "model").string(), staging, "initial", 1);
  ASSERT_TRUE(initial.ok()) << initial.status();
  const std::string rendezvous = (root_ / "rendezvous-one").string();
  for (bool offload : {false, true}) {
    CpuAllocator device;
    CpuBackend backend(device);
    auto weights = CopyStoreToDevice(*initial, backend, DType::kF32, "weights");
    ASSERT_TRUE(weights.ok()) << weights.status();
    const std::string dir = absl::StrCat(rendezvous, "/", offload);
    fs::create_directories(dir);
    auto comm = ConnectThroughDirectory(dir, backend, {0, 1});
    ASSERT_TRUE(comm.ok()) << comm.status();
    const int64_t before = device.current_bytes();
    auto zero = Zero2State::Create(*weights, **comm, backend, nullptr, offload);
    ASSERT_TRUE(zero.ok()) << zero.status();
    const int64_t total = initial->total_bytes();
    EXPECT_FALSE((*zero)->separate_master());  // the checkpoints carry no masters
    if (offload) {
      EXPECT_EQ(device.current_bytes(), before);
      EXPECT_GE(backend.host_allocator().current_bytes(), 4 * total);  // grad, m, v, masters
      EXPECT_EQ((*zero)->master_shards().size(), initial->groups().size());
    } else {
      EXPECT_GE(device.current_bytes() - before, 3 * total);
      EXPECT_EQ(backend.host_allocator().current_bytes(), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Zero2OffloadTest,
                         ::testing::Values(Case{"shared", false, false},
                                           Case{"separate", true, false},
                                           Case{"lora", false, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace sbp
