// Layer checkpoints off the device (worker/engine/offload): the host and disk
// tiers give bit-identical losses and gradients to the device tier in every
// backward mode, run under a device budget the device tier cannot, and fail
// with errors that name what is wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <tuple>

#include "common/failure_kind.h"
#include "tests/worker/engine/engine_test_util.h"
#include "worker/engine/offload/checkpoint_store.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the test's temporary folder.
std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("engine_offload_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::unique_ptr<CheckpointStore> MakeStore(CheckpointTier tier, Backend& backend,
                                           const std::string& name) {
  if (tier == CheckpointTier::kHost) return NewHostCheckpointStore(backend);
  auto store = NewDiskCheckpointStore(backend, TempDir(name));
  CHECK_OK(store.status());
  return *std::move(store);
}

// Loss and gradients of `batch` with the layer inputs in `store` (null: on the device).
std::pair<ParameterStore, BatchResult> RunPass(TestModel& model,
                                               const std::vector<TokenSequence>& batch,
                                               EngineOptions options, CheckpointStore* store) {
  auto grads = ParameterStore::Create(model.config, model.allocator, "gradients");
  CHECK_OK(grads.status());
  Engine engine(model.config, *model.backend, options);
  engine.set_checkpoint_store(store);
  ModelTensors w = BindModelTensors(model.weights);
  ModelTensors g = BindModelTensors(*grads);
  auto result = SftForwardBackward(engine, w, batch, g);
  CHECK_OK(result.status());
  return {*std::move(grads), *result};
}

void ExpectBitIdentical(const ParameterStore& a, const ParameterStore& b,
                        const std::string& label) {
  auto ta = a.NamedTensors(), tb = b.NamedTensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    ASSERT_EQ(ta[i].second.nbytes(), tb[i].second.nbytes());
    EXPECT_EQ(std::memcmp(ta[i].second.raw_data(), tb[i].second.raw_data(), ta[i].second.nbytes()),
              0)
        << label << ": " << ta[i].first << " differs";
  }
}

class OffloadTiersTest
    : public ::testing::TestWithParam<std::tuple<BackwardMode, CheckpointTier, std::string>> {};

TEST_P(OffloadTiersTest, BitIdenticalToTheDeviceTier) {
  const auto [mode, tier, preset] = GetParam();
  auto config = PresetConfig(preset);
  ASSERT_TRUE(config.ok());
  config->num_hidden_layers = 5;  // several inputs stored and fetched
  TestModel model(*config, 7);
  // Unequal lengths: the store's room is reused and grown between sequences.
  const auto batch = MakeBatch(*config, {96, 160, 40}, 11);
  const EngineOptions options{mode, 32, 48};
  const auto [reference, reference_result] = RunPass(model, batch, options, nullptr);
  auto store = MakeStore(tier, *model.backend, std::string(CheckpointTierName(tier)));
  const auto [grads, result] = RunPass(model, batch, options, store.get());
  EXPECT_EQ(std::memcmp(&result.loss, &reference_result.loss, sizeof(double)), 0)
      << result.loss << " vs " << reference_result.loss;
  ExpectBitIdentical(grads, reference, absl::StrCat(preset, " ", BackwardModeName(mode)));
  // Every stored input went out and came back: 2 (L - 1) copies per sequence
  // (memcpy for the host tier, the file's writes and reads for the disk).
  int64_t expected = 0;
  for (const TokenSequence& s : batch) {
    expected += 2 * (config->num_hidden_layers - 1) * static_cast<int64_t>(s.input_ids.size()) *
                config->hidden_size * 4;
  }
  EXPECT_EQ(store->moved_bytes(), expected);
}

INSTANTIATE_TEST_SUITE_P(
    ModesAndTiers, OffloadTiersTest,
    ::testing::Combine(::testing::Values(BackwardMode::kStream, BackwardMode::kCheckpoint,
                                         BackwardMode::kFull),
                       ::testing::Values(CheckpointTier::kHost, CheckpointTier::kDisk),
                       ::testing::Values(std::string("tiny-qwen3"), std::string("tiny-llama"))),
    [](const auto& info) {
      return absl::StrCat(BackwardModeName(std::get<0>(info.param)), "_",
                          CheckpointTierName(std::get<1>(info.param)), "_",
                          std::get<2>(info.param) == "tiny-qwen3" ? "qwen3" : "llama");
    });

TEST(OffloadTiers, OneLayerStoresNothing) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  config->num_hidden_layers = 1;
  TestModel model(*config, 3);
  const auto batch = MakeBatch(*config, {64}, 5);
  const auto [reference, unused] = RunPass(model, batch, {BackwardMode::kStream, 16, 16}, nullptr);
  auto store = NewHostCheckpointStore(*model.backend);
  const auto [grads, result] = RunPass(model, batch, {BackwardMode::kStream, 16, 16}, store.get());
  ExpectBitIdentical(grads, reference, "one layer");
  EXPECT_EQ(store->moved_bytes(), 0);
}

// The device allocator's budget below what the device tier needs for its
// L + 1 layer inputs: the device tier is OUT_OF_MEMORY, the host and disk
// tiers run in it with two device slots, and their device peak is lower by
// (L - 1) inputs.
TEST(OffloadTiers, HostAndDiskRunUnderABudgetTheDeviceTierExceeds) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  config->num_hidden_layers = 6;
  config->hidden_size = 256;
  TestModel model(*config, 5);
  const int64_t T = 512;
  const auto batch = MakeBatch(*config, {static_cast<int>(T)}, 9);
  const EngineOptions options{BackwardMode::kStream, 128, 128};
  const int64_t input_bytes = T * config->hidden_size * 4;

  int64_t device_peak = 0;
  {
    ScopedPeakReset phase(model.allocator);
    RunPass(model, batch, options, nullptr);
    device_peak = phase.phase_peak_bytes();
  }
  for (CheckpointTier tier : {CheckpointTier::kHost, CheckpointTier::kDisk}) {
    auto store = MakeStore(tier, *model.backend, "budget");
    int64_t offload_peak = 0;
    {
      ScopedPeakReset phase(model.allocator);
      RunPass(model, batch, options, store.get());
      offload_peak = phase.phase_peak_bytes();
    }
    // The lm_head phase sets both peaks: L + 1 inputs against 2 slots.
    EXPECT_EQ(device_peak - offload_peak, (config->num_hidden_layers - 1) * input_bytes)
        << CheckpointTierName(tier);
    // Under a budget between the two, only the offloaded pass runs.
    const int64_t budget = offload_peak + input_bytes;
    ASSERT_LT(budget, device_peak);
    model.allocator.set_budget_bytes(budget);
    auto grads = ParameterStore::Create(model.config, model.allocator, "gradients");
    ASSERT_TRUE(grads.ok());
    ModelTensors w = BindModelTensors(model.weights);
    ModelTensors g = BindModelTensors(*grads);
    {
      Engine engine(model.config, *model.backend, options);
      const auto failed = SftForwardBackward(engine, w, batch, g);
      EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted) << failed.status();
    }
    {
      Engine engine(model.config, *model.backend, options);
      engine.set_checkpoint_store(store.get());
      const auto ran = SftForwardBackward(engine, w, batch, g);
      EXPECT_TRUE(ran.ok()) << CheckpointTierName(tier) << ": " << ran.status();
    }
    model.allocator.set_budget_bytes(0);
    if (tier == CheckpointTier::kHost) {
      EXPECT_EQ(store->host_bytes(), (config->num_hidden_layers - 1) * input_bytes);
    } else {
      EXPECT_EQ(store->disk_bytes(), (config->num_hidden_layers - 1) * input_bytes);
      EXPECT_EQ(store->host_bytes(), 0);  // the CPU writes straight from the slots
    }
  }
}

TEST(OffloadDisk, DirectoryMustExistBeADirectoryAndBeWritable) {
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  const std::string dir = TempDir("checks");
  auto missing = NewDiskCheckpointStore(backend, dir + "/nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find(dir + "/nope"), std::string::npos) << missing.status();
  const std::string file = dir + "/file";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  auto not_dir = NewDiskCheckpointStore(backend, file);
  EXPECT_EQ(not_dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(not_dir.status().message().find("not a directory"), std::string::npos);
  if (::geteuid() != 0) {  // root writes anywhere
    const std::string locked = dir + "/locked";
    fs::create_directories(locked);
    ::chmod(locked.c_str(), 0500);
    auto not_writable = NewDiskCheckpointStore(backend, locked);
    EXPECT_EQ(not_writable.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(not_writable.status().message().find("not writable"), std::string::npos);
    ::chmod(locked.c_str(), 0700);
  }
}

// The file is unnamed: nothing is left in the directory while it is in use,
// after the store is gone, or if the process dies.
TEST(OffloadDisk, LeavesNoFileBehind) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  TestModel model(*config, 2);
  const std::string dir = TempDir("no_files");
  {
    auto store = NewDiskCheckpointStore(*model.backend, dir);
    ASSERT_TRUE(store.ok());
    RunPass(model, MakeBatch(*config, {64}, 1), {BackwardMode::kStream, 16, 16}, store->get());
    EXPECT_GT((*store)->disk_bytes(), 0);
    EXPECT_TRUE(fs::is_empty(dir));
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

// A disk too small for the layer inputs (the worker's allowance here) is a
// STORAGE failure before the first write, naming the directory and the bytes.
TEST(OffloadDisk, FullDiskIsAStorageFailureNamingPathAndBytes) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  config->num_hidden_layers = 4;
  TestModel model(*config, 2);
  const std::string dir = TempDir("full");
  auto store = NewDiskCheckpointStore(*model.backend, dir, /*max_file_bytes=*/4096);
  ASSERT_TRUE(store.ok());
  auto grads = ParameterStore::Create(model.config, model.allocator, "gradients");
  ASSERT_TRUE(grads.ok());
  Engine engine(model.config, *model.backend, {BackwardMode::kStream, 16, 16});
  engine.set_checkpoint_store(store->get());
  ModelTensors w = BindModelTensors(model.weights);
  ModelTensors g = BindModelTensors(*grads);
  const auto failed = SftForwardBackward(engine, w, MakeBatch(*config, {64}, 1), g);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(GetFailureKind(failed.status()), FailureKind::kStorage) << failed.status();
  const int64_t needed = 3 * 64 * config->hidden_size * 4;
  EXPECT_NE(failed.status().message().find(dir), std::string::npos) << failed.status();
  EXPECT_NE(failed.status().message().find(absl::StrCat(needed, " bytes")), std::string::npos)
      << failed.status();
}

}  // namespace
}  // namespace sbp::testing
