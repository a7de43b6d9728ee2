// Optimizer offload (ZeRO-Offload) on one worker, on the CPU: gradients,
// masters and AdamW moments in the backend's host memory, updated there. It
// trains bit for bit like the on-device optimizer (weights, moments, gradient
// norms) with one or several backward passes per step, tied or untied
// embeddings, full fine-tuning or LoRA; checkpoints resume across the two;
// and the device's memory drops by what moved to the host.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/random.h"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/engine/device_store.h"
#include "worker/engine/engine.h"
#include "worker/engine/lora_store.h"
#include "worker/engine/token_loss.h"
#include "worker/model/file_util.h"
#include "worker/model/model_io.h"
#include "worker/train/checkpoint.h"
#include "worker/train/optimizer.h"
#include "worker/train/optimizer_state.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

class OptimizerOffloadTest : public train_testing::TrainerFixture {
 protected:
  JobSpec OffloadSpec(const std::string& name, bool offload) {
    JobSpec spec = Spec(name);
    spec.train.steps = 20;
    spec.train.optimizer_offload = offload;
    return spec;
  }
  static std::string ReadFile(const std::string& path) {
    auto bytes = ReadFileToString(path);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? *bytes : "";
  }
  // Every file of two checkpoints but trainer_state.json (which names the
  // run) is byte for byte the same.
  static void ExpectSameCheckpoint(const std::string& a, const std::string& b) {
    std::vector<std::string> names;
    for (const auto& entry : fs::recursive_directory_iterator(a)) {
      const std::string name = fs::relative(entry.path(), a).string();
      if (entry.is_regular_file() && entry.path().filename() != kTrainerStateFile) {
        names.push_back(name);
      }
    }
    ASSERT_FALSE(names.empty()) << a;
    for (const std::string& name : names) {
      const std::string x = ReadFile(a + "/" + name), y = ReadFile(b + "/" + name);
      EXPECT_FALSE(x.empty()) << name;
      EXPECT_TRUE(x == y) << name << " differs between " << a << " and " << b;
    }
  }
  // Losses and gradient norms, bit for bit (JSON keeps doubles exactly),
  // from `b`'s first step on (a resumed run's log starts there).
  static void ExpectSameCurves(const JobSpec& a, const JobSpec& b) {
    const auto x = Metrics(a), y = Metrics(b);
    ASSERT_FALSE(y.empty());
    const size_t offset = y.front()["step"].get<size_t>() - 1;
    ASSERT_EQ(x.size(), offset + y.size());
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_EQ(x[offset + i]["loss"], y[i]["loss"]) << "step " << offset + i + 1;
      EXPECT_EQ(x[offset + i]["grad_norm"], y[i]["grad_norm"]) << "step " << offset + i + 1;
    }
  }
  static std::string Final(const JobSpec& spec) {
    return CheckpointPath(spec.checkpoint.dir, spec.train.steps);
  }
};

// ---- through the trainer ------------------------------------------------------

struct Batching {
  int sequences, micro_batch;
  bool separate_master;
};

class OffloadBatchingTest : public OptimizerOffloadTest,
                            public ::testing::WithParamInterface<Batching> {};

TEST_P(OffloadBatchingTest, TrainsBitForBitLikeTheDevice) {
  const Batching b = GetParam();
  TrainOptions options;
  options.separate_master = b.separate_master;
  std::vector<JobSpec> runs;
  for (bool offload : {false, true}) {
    JobSpec spec = OffloadSpec(offload ? "offload" : "device", offload);
    spec.train.sequences_per_step = b.sequences;
    spec.train.micro_batch_sequences = b.micro_batch;
    auto summary = RunTraining(spec, options, nullptr);
    ASSERT_TRUE(summary.ok()) << summary.status();
    runs.push_back(spec);
  }
  ExpectSameCheckpoint(Final(runs[0]), Final(runs[1]));
  ExpectSameCurves(runs[0], runs[1]);
  // The masters travel with the checkpoint exactly when the run keeps them apart.
  const std::string optimizer =
      ReadFile(TrainerStateDir(Final(runs[1])) + "/optimizer.safetensors");
  EXPECT_EQ(optimizer.find(kMasterPrefix) != std::string::npos, b.separate_master);
}

INSTANTIATE_TEST_SUITE_P(Batchings, OffloadBatchingTest,
                         ::testing::Values(Batching{1, 1, false}, Batching{3, 3, false},
                                           Batching{3, 2, false}, Batching{3, 2, true}),
                         [](const ::testing::TestParamInfo<Batching>& info) {
                           return absl::StrCat(info.param.sequences, "_sequences_micro_",
                                               info.param.micro_batch,
                                               info.param.separate_master ? "_masters" : "");
                         });

TEST_F(OptimizerOffloadTest, ResumeIsBitIdenticalToAnUninterruptedRun) {
  const JobSpec straight = OffloadSpec("straight", true);
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());
  const JobSpec interrupted = OffloadSpec("interrupted", true);
  TrainOptions stop;
  stop.stop_after_step = 7;  // between the periodic checkpoints at 5 and 10
  auto first = RunTraining(interrupted, stop, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->last_step, 7);
  auto second = RunTraining(interrupted, {}, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->first_step, 8);
  ExpectSameCheckpoint(Final(straight), Final(interrupted));
  ExpectSameCurves(straight, interrupted);
}

// A checkpoint does not say where its optimizer ran: an offloaded run
// resumes from an on-device one and the other way round, bit for bit.
TEST_F(OptimizerOffloadTest, ResumesAcrossOffloadBitForBit) {
  const JobSpec straight = OffloadSpec("straight", false);
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());
  const JobSpec device = OffloadSpec("device", false);
  const JobSpec offload = OffloadSpec("offload", true);
  TrainOptions stop;
  stop.stop_after_step = 7;
  for (const JobSpec& spec : {device, offload}) {
    ASSERT_TRUE(RunTraining(spec, stop, nullptr).ok());
  }
  // Each continues from the other's step-7 checkpoint, in a run of its own.
  for (bool to_offload : {true, false}) {
    JobSpec resumed =
        OffloadSpec(to_offload ? "device_then_offload" : "offload_then_device", to_offload);
    resumed.resume_from = CheckpointPath((to_offload ? device : offload).checkpoint.dir, 7);
    auto summary = RunTraining(resumed, {}, nullptr);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_EQ(summary->first_step, 8);
    ExpectSameCheckpoint(Final(straight), Final(resumed));
    ExpectSameCurves(straight, resumed);
  }
}

TEST_F(OptimizerOffloadTest, LoraTrainsTheAdaptersLikeTheDevice) {
  std::vector<JobSpec> runs;
  for (bool offload : {false, true}) {
    JobSpec spec = OffloadSpec(offload ? "lora_offload" : "lora_device", offload);
    spec.train.steps = 8;
    spec.train.sequences_per_step = 3;
    spec.lora.r = 4;
    spec.lora.alpha = 8;
    spec.lora.target_modules = LoraModuleNames();
    spec.lora.init_seed = 5;
    auto summary = RunTraining(spec, {}, nullptr);
    ASSERT_TRUE(summary.ok()) << summary.status();
    runs.push_back(spec);
  }
  EXPECT_TRUE(fs::exists(Final(runs[1]) + "/adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(Final(runs[1]) + "/model.safetensors"));
  ExpectSameCheckpoint(Final(runs[0]), Final(runs[1]));
  ExpectSameCurves(runs[0], runs[1]);
  const auto metrics = Metrics(runs[1]);
  EXPECT_LT(metrics.back()["loss"].get<double>(), metrics.front()["loss"].get<double>());
}

// ---- memory -----------------------------------------------------------------

// Bytes of the largest layer group and of the embed and final groups: the
// device's gradient buffers under offload.
int64_t GradientCacheBytes(const ParameterStore& store) {
  int64_t largest_layer = 0;
  for (int l = 0; l < store.config().num_hidden_layers; ++l) {
    largest_layer =
        std::max<int64_t>(largest_layer, 4 * store.groups()[store.layer_group(l)].flat.numel());
  }
  return 2 * largest_layer + 4 * store.groups()[store.embed_group()].flat.numel() +
         4 * store.groups()[store.final_group()].flat.numel();
}

TEST_F(OptimizerOffloadTest, DevicePeakDropsByTheMovedState) {
  for (bool separate : {false, true}) {
    TrainOptions options;
    options.separate_master = separate;
    std::vector<int64_t> peaks;
    for (bool offload : {false, true}) {
      JobSpec spec = OffloadSpec(absl::StrCat(offload ? "offload" : "device", separate), offload);
      spec.train.steps = 2;
      auto summary = RunTraining(spec, options, nullptr);
      ASSERT_TRUE(summary.ok()) << summary.status();
      peaks.push_back(summary->peak_bytes);
    }
    CpuAllocator allocator;
    auto layout = ParameterStore::Load((root_ / "model").string(), allocator, "layout");
    ASSERT_TRUE(layout.ok()) << layout.status();
    // Gradients and both moments (and separate masters) left the device; the
    // one-layer cache and the embed and final buffers came.
    const int64_t moved = (separate ? 4 : 3) * layout->total_bytes();
    EXPECT_LE(peaks[1], peaks[0] - moved + GradientCacheBytes(*layout))
        << "separate masters " << separate;
    EXPECT_LT(peaks[1], peaks[0]);
  }
}

// The state itself: what it allocates where, before any step.
TEST_F(OptimizerOffloadTest, HostMemoryHoldsTheMovedState) {
  CpuAllocator staging;
  auto initial = ParameterStore::Load((root_ / "model").string(), staging, "initial");
  ASSERT_TRUE(initial.ok()) << initial.status();
  const int64_t total = initial->total_bytes();
  TrainSpec train;
  int64_t device_bytes[2], host_bytes[2];
  for (bool offload : {false, true}) {
    CpuAllocator device;
    CpuBackend backend(device);
    auto weights = CopyStoreToDevice(*initial, backend, DType::kF32, "weights");
    ASSERT_TRUE(weights.ok()) << weights.status();
    Engine engine(weights->config(), backend, {BackwardMode::kStream, 8, 8});
    OptimizerStateOptions options;
    options.weights = &*weights;
    options.initial = &*initial;
    options.separate_master = true;
    options.offload = offload;
    const int64_t before = device.current_bytes();
    auto state = CreateOptimizerState(options, backend, train, engine);
    ASSERT_TRUE(state.ok()) << state.status();
    device_bytes[offload] = device.current_bytes() - before;
    host_bytes[offload] = backend.host_allocator().current_bytes();
    EXPECT_EQ((*state)->host_current_bytes(), offload ? host_bytes[1] : 0);
    EXPECT_EQ((*state)->host_peak_bytes(), offload ? backend.host_allocator().peak_bytes() : 0);
  }
  // On the device: masters, gradients and moments; else only the cache.
  EXPECT_GE(device_bytes[0], 4 * total);
  EXPECT_EQ(host_bytes[0], 0);
  EXPECT_GE(host_bytes[1], 4 * total);
  EXPECT_LE(host_bytes[1], 4 * total + 4 * 4096 * static_cast<int64_t>(initial->groups().size()));
  EXPECT_LE(device_bytes[1], GradientCacheBytes(*initial) + 2 * 4096);
}

// ---- a bf16 compute copy ---------------------------------------------------------

// Fills every gradient view the sink bound for `group` (values from `seed`).
void FillBoundGroup(const ParameterStore& layout, int group, ModelTensors& grads, uint64_t seed) {
  std::vector<Tensor*> views;
  if (group == layout.embed_group()) {
    views = {&grads.embed};
  } else if (group == layout.final_group()) {
    views = {&grads.final_norm, &grads.lm_head};
  } else {
    LayerWeights& w = grads.layers[group - 1];
    views = {&w.input_norm, &w.q_proj,    &w.q_bias,  &w.k_proj,   &w.k_bias,
             &w.v_proj,     &w.v_bias,    &w.o_proj,  &w.q_norm,   &w.k_norm,
             &w.post_norm,  &w.gate_proj, &w.up_proj, &w.down_proj};
  }
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i]->defined()) FillUniform(*views[i], seed * 31 + i, -1.0f, 1.0f);
  }
}

// With a bf16 compute copy the masters are cast on the host and uploaded
// through the staging buffers: the compute copy is exactly the masters of an
// f32 run rounded to bf16, and the optimizer state is the same.
TEST_F(OptimizerOffloadTest, Bf16ComputeCopyIsTheRoundedMasters) {
  CpuAllocator staging;
  auto initial = ParameterStore::Load((root_ / "model").string(), staging, "initial");
  ASSERT_TRUE(initial.ok()) << initial.status();
  const int L = initial->config().num_hidden_layers;
  TrainSpec train;
  train.weight_decay = 0.01;
  struct Run {
    CpuAllocator device;
    std::unique_ptr<CpuBackend> backend;
    ParameterStore weights;
    std::unique_ptr<Engine> engine;
    std::unique_ptr<OptimizerState> state;
    ModelTensors grads;
  };
  Run runs[2];  // f32, bf16 compute copies
  for (int k = 0; k < 2; ++k) {
    Run& r = runs[k];
    r.backend = std::make_unique<CpuBackend>(r.device);
    auto weights =
        CopyStoreToDevice(*initial, *r.backend, k == 0 ? DType::kF32 : DType::kBF16, "weights");
    ASSERT_TRUE(weights.ok()) << weights.status();
    r.weights = *std::move(weights);
    r.engine = std::make_unique<Engine>(initial->config(), *r.backend, EngineOptions{});
    OptimizerStateOptions options;
    options.weights = &r.weights;
    options.initial = &*initial;
    options.separate_master = true;
    options.offload = true;
    auto state = CreateOptimizerState(options, *r.backend, train, *r.engine);
    ASSERT_TRUE(state.ok()) << state.status();
    r.state = *std::move(state);
  }
  ASSERT_EQ(runs[1].weights.groups()[0].flat.dtype(), DType::kBF16);
  for (int64_t step = 1; step <= 3; ++step) {
    double norms[2];
    for (int k = 0; k < 2; ++k) {
      Run& r = runs[k];
      auto* sink = dynamic_cast<GradientSink*>(r.state.get());
      ASSERT_NE(sink, nullptr);
      r.state->ZeroGradients();
      for (int pass = 0; pass < 2; ++pass) {  // the engine's order
        std::vector<int> order = {r.weights.final_group()};
        for (int l = L - 1; l >= 0; --l) order.push_back(r.weights.layer_group(l));
        order.push_back(r.weights.embed_group());
        ASSERT_TRUE(sink->BeginPass().ok());
        for (int group : order) {
          ASSERT_TRUE(sink->Acquire(group, r.state->grads()).ok());
          FillBoundGroup(r.weights, group, r.state->grads(), 1000 * step + 100 * pass + group);
          ASSERT_TRUE(sink->Release(group).ok());
        }
      }
      auto norm = r.state->GlobalGradNorm();
      ASSERT_TRUE(norm.ok()) << norm.status();
      norms[k] = *norm;
      ASSERT_TRUE(r.state->Update(1e-2, step, ClipScale(*norm, 1.0)).ok());
    }
    ASSERT_EQ(std::memcmp(&norms[0], &norms[1], sizeof(double)), 0) << "step " << step;
    for (size_t g = 0; g < runs[0].weights.groups().size(); ++g) {
      const Tensor& f32 = runs[0].weights.groups()[g].flat;
      Tensor rounded = *Tensor::Empty(staging, f32.shape(), DType::kBF16);
      runs[0].backend->Cast(f32, rounded);
      const Tensor& bf16 = runs[1].weights.groups()[g].flat;
      ASSERT_EQ(std::memcmp(rounded.raw_data(), bf16.raw_data(), bf16.nbytes()), 0)
          << "step " << step << " group " << g;
    }
  }
  std::string dirs[2];
  for (int k = 0; k < 2; ++k) {
    dirs[k] = (root_ / absl::StrCat("bf16-", k)).string();
    TrainerState state;
    state.step = 3;
    ASSERT_TRUE(runs[k].state->Save(CheckpointSink{dirs[k], 0, {}, ""}, state, 0).ok());
  }
  EXPECT_TRUE(ReadFile(TrainerStateDir(CheckpointPath(dirs[0], 3)) + "/optimizer.safetensors") ==
              ReadFile(TrainerStateDir(CheckpointPath(dirs[1], 3)) + "/optimizer.safetensors"));
}

// ---- the state on its own: tied embeddings, several passes per step ------------

// Two states (on-device and offloaded) on backends of their own, fed the
// same sequences; after every step the gradient norms and the compute
// weights agree bit for bit, and at the end the checkpoints do.
class OffloadStateTest : public OptimizerOffloadTest,
                         public ::testing::WithParamInterface<std::pair<const char*, int>> {};

TEST_P(OffloadStateTest, MatchesTheDeviceStateStepByStep) {
  const auto [preset, passes] = GetParam();
  auto config = PresetConfig(preset);
  ASSERT_TRUE(config.ok());
  CpuAllocator host;
  auto model = InitModelWeights(*config, 7, host);
  ASSERT_TRUE(model.ok());
  auto initial = ParameterStore::FromWeights(*model, host, "initial");
  ASSERT_TRUE(initial.ok()) << initial.status();
  TrainSpec train;
  train.weight_decay = 0.01;
  constexpr int64_t kTokens = 20;
  std::vector<Tensor> ids, targets;
  for (int s = 0; s < passes; ++s) {
    ids.push_back(*Tensor::Empty(host, {kTokens}, DType::kI32));
    targets.push_back(*Tensor::Empty(host, {kTokens}, DType::kI32));
    FillIntegers(ids.back(), 40 + s, 0, static_cast<int32_t>(config->vocab_size));
    FillIntegers(targets.back(), 80 + s, 0, static_cast<int32_t>(config->vocab_size));
  }

  struct Run {
    CpuAllocator device;
    std::unique_ptr<CpuBackend> backend;
    ParameterStore weights;
    std::unique_ptr<Engine> engine;
    std::unique_ptr<OptimizerState> state;
  };
  Run runs[2];
  for (int offload = 0; offload < 2; ++offload) {
    Run& r = runs[offload];
    r.backend = std::make_unique<CpuBackend>(r.device);
    auto weights = CopyStoreToDevice(*initial, *r.backend, DType::kF32, "weights");
    ASSERT_TRUE(weights.ok()) << weights.status();
    r.weights = *std::move(weights);
    r.engine =
        std::make_unique<Engine>(*config, *r.backend, EngineOptions{BackwardMode::kStream, 8, 8});
    OptimizerStateOptions options;
    options.weights = &r.weights;
    options.initial = &r.weights;
    options.offload = offload == 1;
    auto state = CreateOptimizerState(options, *r.backend, train, *r.engine);
    ASSERT_TRUE(state.ok()) << state.status();
    r.state = *std::move(state);
  }
  for (int64_t step = 1; step <= 20; ++step) {
    double norms[2];
    for (int k = 0; k < 2; ++k) {
      Run& r = runs[k];
      r.state->ZeroGradients();
      const ModelTensors w = BindModelTensors(r.weights);
      for (int s = 0; s < passes; ++s) {
        CrossEntropyTokenLoss loss(1.0 / (passes * kTokens));
        auto ran = r.engine->ForwardBackward(w, ids[s], targets[s], loss, r.state->grads());
        ASSERT_TRUE(ran.ok()) << ran.status();
      }
      ASSERT_TRUE(r.state->FinishBackward().ok());
      auto norm = r.state->GlobalGradNorm();
      ASSERT_TRUE(norm.ok()) << norm.status();
      norms[k] = *norm;
      ASSERT_TRUE(r.state->Update(1e-2, step, ClipScale(*norm, 1.0)).ok());
    }
    ASSERT_EQ(std::memcmp(&norms[0], &norms[1], sizeof(double)), 0)
        << "step " << step << ": " << norms[0] << " vs " << norms[1];
    for (size_t g = 0; g < runs[0].weights.groups().size(); ++g) {
      const Tensor& a = runs[0].weights.groups()[g].flat;
      const Tensor& b = runs[1].weights.groups()[g].flat;
      ASSERT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0)
          << "step " << step << " group " << runs[0].weights.groups()[g].name;
    }
  }
  EXPECT_GT(runs[1].state->offload_copied_bytes(), 0);
  // Moments (and weights) through the checkpoint files.
  std::string dirs[2];
  for (int k = 0; k < 2; ++k) {
    dirs[k] = (root_ / absl::StrCat("state-", k)).string();
    TrainerState state;
    state.step = 20;
    ASSERT_TRUE(runs[k].state->Save(CheckpointSink{dirs[k], 0, {}, ""}, state, 0).ok());
  }
  ExpectSameCheckpoint(CheckpointPath(dirs[0], 20), CheckpointPath(dirs[1], 20));
}

INSTANTIATE_TEST_SUITE_P(Models, OffloadStateTest,
                         ::testing::Values(std::pair{"tiny-qwen3", 1}, std::pair{"tiny-qwen3", 3},
                                           std::pair{"tiny-llama", 1}, std::pair{"tiny-llama", 3}),
                         [](const ::testing::TestParamInfo<std::pair<const char*, int>>& info) {
                           std::string name =
                               absl::StrCat(info.param.first, "_", info.param.second, "_passes");
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace sbp
