// The disk tier keeps layer inputs out of the process's memory: a training
// pass whose stored layer inputs are far larger than everything else peaks
// (VmHWM, this process alone: the test is the only one in its binary) below
// the bytes it wrote to the offload file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/worker/engine/engine_test_util.h"
#include "worker/engine/offload/checkpoint_store.h"

namespace sbp::testing {
namespace {

int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

TEST(OffloadDiskMemory, PeakRssStaysBelowTheBytesWritten) {
  // Wide and narrow: layer inputs of T x 2048 f32 (16 MiB each) dominate,
  // while attention and the MLP stay cheap.
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  config->hidden_size = 2048;
  config->num_hidden_layers = 16;
  config->num_attention_heads = 2;
  config->num_key_value_heads = 1;
  config->head_dim = 16;
  config->intermediate_size = 32;
  config->vocab_size = 64;
  TestModel model(*config, 3);
  const int64_t T = 2048;
  const auto batch = MakeBatch(*config, {static_cast<int>(T)}, 4);
  const std::string dir = ::testing::TempDir() + "/engine_offload_rss";
  std::filesystem::create_directories(dir);
  auto store = NewDiskCheckpointStore(*model.backend, dir);
  ASSERT_TRUE(store.ok()) << store.status();

  auto grads = ParameterStore::Create(model.config, model.allocator, "gradients");
  ASSERT_TRUE(grads.ok());
  Engine engine(model.config, *model.backend, {BackwardMode::kStream, 512, 512});
  engine.set_checkpoint_store(store->get());
  ModelTensors w = BindModelTensors(model.weights);
  ModelTensors g = BindModelTensors(*grads);
  const auto ran = SftForwardBackward(engine, w, batch, g);
  ASSERT_TRUE(ran.ok()) << ran.status();

  const int64_t written = (*store)->disk_bytes();
  EXPECT_EQ(written, (config->num_hidden_layers - 1) * T * config->hidden_size * 4);
  const int64_t peak_rss = PeakRssBytes();
  ASSERT_GT(peak_rss, 0);
  EXPECT_LT(peak_rss, written) << "peak RSS " << peak_rss << " bytes, wrote " << written;
  // Besides weights and gradients, the device allocator held two slots and a
  // few other [T, H] buffers, not L + 1 inputs.
  const int64_t model_bytes = 2 * model.weights.total_bytes();
  EXPECT_LT(model.allocator.peak_bytes() - model_bytes, 5 * T * config->hidden_size * 4);
  std::printf("{\"peak_rss_bytes\": %lld, \"written_bytes\": %lld, \"device_peak_bytes\": %lld}\n",
              static_cast<long long>(peak_rss), static_cast<long long>(written),
              static_cast<long long>(model.allocator.peak_bytes()));
}

}  // namespace
}  // namespace sbp::testing
