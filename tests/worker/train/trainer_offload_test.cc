// Jobs with their layer checkpoints off the device (streambp.offload): the
// disk tier trains a job whose layer inputs are larger than its whole device
// budget, to the same weights as the device tier; the host tier does the
// same for LoRA; `auto` picks a tier that fits; a bad disk_dir fails before
// the first step, and no offload file outlives the run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/random.h"
#include "nlohmann/json.hpp"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/engine/planner.h"
#include "worker/model/model_io.h"
#include "worker/train/job_plan.h"
#include "worker/train/trainer.h"

namespace sbp::train_testing {
namespace {

// Wide and shallow per layer, many layers: at 2048 tokens the layer inputs
// (13 x 4 MiB) outweigh everything else a step holds.
constexpr int64_t kTokens = 2048;

ModelConfig WideConfig() {
  ModelConfig c = *PresetConfig("tiny-qwen3");
  c.hidden_size = 512;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 16;
  c.intermediate_size = 32;
  return c;
}

class TrainerOffloadTest : public TrainerFixture {
 protected:
  void SetUp() override {
    TrainerFixture::SetUp();
    CpuAllocator allocator;
    auto weights = InitModelWeights(WideConfig(), 5, allocator);
    ASSERT_TRUE(weights.ok());
    ASSERT_TRUE(SaveModelDirectory((root_ / "wide").string(), *weights, DType::kF32).ok());
    std::ofstream data(root_ / "long.jsonl");
    for (int i = 0; i < 2; ++i) {
      std::vector<int32_t> ids(kTokens);
      Tensor t = Tensor::Wrap(ids.data(), {kTokens}, DType::kI32);
      FillIntegers(t, 200 + i, 0, 256);
      data << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
    }
  }

  JobSpec LongSpec(const std::string& name) {
    JobSpec spec = Spec(name);
    spec.model = (root_ / "wide").string();
    spec.data = (root_ / "long.jsonl").string();
    spec.seq_len = kTokens;
    spec.streambp = {BackwardMode::kStream, 256, 256};
    spec.train.steps = 2;
    spec.train.sequences_per_step = 1;
    spec.train.micro_batch_sequences = 1;
    spec.train.warmup_steps = 0;
    spec.checkpoint.every_steps = 0;
    return spec;
  }
};

TEST_F(TrainerOffloadTest, DiskTierTrainsPastTheBudgetToTheSameWeights) {
  const JobSpec device_spec = LongSpec("device");
  auto device = RunTraining(device_spec, {}, nullptr);
  ASSERT_TRUE(device.ok()) << device.status();

  JobSpec disk_spec = LongSpec("disk");
  disk_spec.streambp.offload.checkpoints = CheckpointTier::kDisk;
  // The budget is the disk tier's plan at this length: on the CPU the
  // planner's figure is the allocator's peak to the byte.
  PlanRequest request = PlanRequestForSpec(disk_spec, WideConfig());
  auto plan = PlanMemory(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  disk_spec.resources.memory_bytes = plan->allocator_peak_bytes();
  const int64_t layer_inputs = (WideConfig().num_hidden_layers + 1) * kTokens * 512 * 4;
  ASSERT_GT(layer_inputs, disk_spec.resources.memory_bytes)
      << "the layer inputs alone must exceed the device budget";

  auto disk = RunTraining(disk_spec, {}, nullptr);
  ASSERT_TRUE(disk.ok()) << disk.status();
  EXPECT_EQ(disk->peak_bytes, plan->allocator_peak_bytes());
  EXPECT_EQ(FinalWeights(disk_spec), FinalWeights(device_spec));
  EXPECT_EQ(Metrics(disk_spec).back()["loss"], Metrics(device_spec).back()["loss"]);
  // The offload folder is left empty: its file had no name.
  EXPECT_TRUE(fs::is_empty(disk_spec.checkpoint.dir + "/offload"));

  // The device tier cannot run in that budget: OUT_OF_MEMORY naming the plan.
  JobSpec tight = LongSpec("tight");
  tight.streambp.offload.checkpoints = CheckpointTier::kDevice;
  tight.resources.memory_bytes = disk_spec.resources.memory_bytes;
  auto refused = RunTraining(tight, {}, nullptr);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("device checkpoints"), std::string::npos)
      << refused.status();
}

TEST_F(TrainerOffloadTest, AutoChoosesTheHostTierWhenTheDeviceTierDoesNotFit) {
  JobSpec device_spec = LongSpec("auto_device");
  device_spec.train.steps = 1;
  auto device = RunTraining(device_spec, {}, nullptr);
  ASSERT_TRUE(device.ok()) << device.status();

  JobSpec spec = LongSpec("auto");
  spec.train.steps = 1;
  PlanRequest request = PlanRequestForSpec(spec, WideConfig());
  request.checkpoint_tier = CheckpointTier::kHost;
  auto host_plan = PlanMemory(request);
  ASSERT_TRUE(host_plan.ok());
  // Room for the host tier's plan with the safety margin, not the device tier's.
  spec.resources.memory_bytes =
      static_cast<int64_t>(host_plan->peak_bytes / (1 - DefaultSafetyMargin(DeviceKind::kCpu))) +
      4096;
  ASSERT_LT(spec.resources.memory_bytes, device->peak_bytes);
  auto ran = RunTraining(spec, {}, nullptr);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(FinalWeights(spec), FinalWeights(device_spec));
}

TEST_F(TrainerOffloadTest, HostTierWithLoraMatchesTheDeviceTier) {
  JobSpec device_spec = LongSpec("lora_device");
  device_spec.lora.r = 4;
  device_spec.lora.alpha = 8;
  device_spec.lora.target_modules = LoraModuleNames();
  auto device = RunTraining(device_spec, {}, nullptr);
  ASSERT_TRUE(device.ok()) << device.status();
  JobSpec host_spec = device_spec;
  host_spec.name = "lora_host";
  host_spec.checkpoint.dir = (root_ / "runs" / "lora_host").string();
  host_spec.streambp.offload.checkpoints = CheckpointTier::kHost;
  auto host = RunTraining(host_spec, {}, nullptr);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_LT(host->peak_bytes, device->peak_bytes);
  EXPECT_EQ(FinalFile(host_spec, "adapter_model.safetensors"),
            FinalFile(device_spec, "adapter_model.safetensors"));
}

TEST_F(TrainerOffloadTest, BadDiskDirFailsBeforeTheFirstStep) {
  JobSpec spec = LongSpec("bad_dir");
  spec.streambp.offload.checkpoints = CheckpointTier::kDisk;
  spec.streambp.offload.disk_dir = (root_ / "missing").string();
  auto missing = RunTraining(spec, {}, nullptr);
  ASSERT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument) << missing.status();
  EXPECT_NE(missing.status().message().find("streambp.offload.disk_dir"), std::string::npos)
      << missing.status();
  EXPECT_TRUE(Metrics(spec).empty());  // not one step ran
  std::ofstream(root_ / "a_file") << "x";
  spec.streambp.offload.disk_dir = (root_ / "a_file").string();
  spec.checkpoint.dir = (root_ / "runs" / "bad_dir_file").string();  // another spec, another run
  auto not_dir = RunTraining(spec, {}, nullptr);
  ASSERT_EQ(not_dir.status().code(), absl::StatusCode::kInvalidArgument) << not_dir.status();
  EXPECT_NE(not_dir.status().message().find("not a directory"), std::string::npos);
}

}  // namespace
}  // namespace sbp::train_testing
