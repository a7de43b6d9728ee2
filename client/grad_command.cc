#include "client/grad_command.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "client/cli_common.h"
#include "client/device_setup.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/engine/batch.h"
#include "worker/engine/device_store.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_io.h"
#include "worker/model/safetensors.h"
#include "worker/train/checkpoint_argument.h"
#include "worker/train/dataset.h"
#include "worker/train/jsonl_data.h"

namespace sbp::cli {
namespace {

struct GradOptions {
  std::string model;
  std::string data;
  std::string mode = "stream";
  int64_t chunk_tokens = 0;
  int64_t logits_chunk_tokens = 0;
  std::string out;
  std::string device = "cpu";
  std::string precision = "auto";
};

absl::Status RunGrad(const GradOptions& o) {
  ASSIGN_OR_RETURN(BackwardMode mode, ParseBackwardMode(o.mode));
  ASSIGN_OR_RETURN(ComputeDevice device, OpenCommandDevice(o.device, o.precision));
  Backend& backend = *device.backend;
  Allocator& allocator = *device.allocator;
  ASSIGN_OR_RETURN(const std::string model_dir, ResolveCheckpointArgument("--model", o.model));
  ASSIGN_OR_RETURN(DeviceModel model, LoadDeviceModel(device, model_dir, "", 0));
  ParameterStore& weights = model.weights;
  ParameterStore& grads = model.grads;
  const ModelConfig config = weights.config();
  // Token JSONL or a shard file, told apart by the file's first bytes.
  ASSIGN_OR_RETURN(const Dataset data,
                   Dataset::Load(Objective::kSft, o.data, DataOptions{config.vocab_size}));
  if (data.objective() != Objective::kSft) {
    return absl::InvalidArgumentError(absl::StrCat("--data: '", o.data, "' holds ",
                                                   ObjectiveName(data.objective()),
                                                   " examples; sbp grad takes SFT sequences"));
  }
  std::vector<TokenSequence> batch;
  for (int64_t i = 0; i < data.size(); ++i) batch.push_back(data.SftAt(i));
  RETURN_IF_ERROR(CheckModelRunsOn(config, backend));
  Engine engine(config, backend, {mode, o.chunk_tokens, o.logits_chunk_tokens});
  ModelTensors w = BindModelTensors(weights);
  ModelTensors g = BindModelTensors(grads);
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(BatchResult result, SftForwardBackward(engine, w, batch, g));
  backend.Synchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Gradients on a GPU come back to the host (f32) to be written.
  CpuAllocator host_allocator;
  ParameterStore host_grads;
  const ParameterStore* written = &grads;
  if (!backend.device().is_cpu()) {
    ASSIGN_OR_RETURN(host_grads, ParameterStore::Create(config, host_allocator, "gradients"));
    RETURN_IF_ERROR(CopyStoreToHost(grads, backend, host_grads));
    written = &host_grads;
  }
  RETURN_IF_ERROR(
      WriteSafetensors(o.out, written->NamedTensors(), {{"format", "pt"}}, DType::kF32));
  nlohmann::json line = {{"loss", result.loss},
                         {"tokens", result.tokens},
                         {"valid_targets", result.valid_targets},
                         {"sequences", batch.size()},
                         {"mode", o.mode},
                         {"device", DeviceName(backend.device())},
                         {"dtype", DTypeName(backend.activation_dtype())},
                         {"peak_bytes", allocator.peak_bytes()},
                         {"seconds", seconds},
                         {"out", o.out}};
  std::printf("%s\n", line.dump().c_str());
  return absl::OkStatus();
}

}  // namespace

void AddGradCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GradOptions>();
  CLI::App* grad = app.add_subcommand("grad", "loss and gradients of a batch of SFT sequences");
  grad->add_option("--model", o->model,
                   "Hugging Face model or checkpoint directory, or a run directory (its newest "
                   "checkpoint)")
      ->required();
  grad->add_option("--data", o->data,
                   "SFT token JSONL (input_ids and labels, or prompt_ids and completion_ids) or a "
                   "token shard file")
      ->required();
  grad->add_option("--mode", o->mode, "backward mode")
      ->check(CLI::IsMember({"stream", "checkpoint", "full"}))
      ->capture_default_str();
  grad->add_option("--chunk-tokens", o->chunk_tokens, "query chunk rows (0: auto)")
      ->check(CLI::NonNegativeNumber);
  grad->add_option("--logits-chunk-tokens", o->logits_chunk_tokens, "logits chunk rows (0: auto)")
      ->check(CLI::NonNegativeNumber);
  grad->add_option("--out", o->out, "gradients .safetensors to write")->required();
  grad->add_option("--device", o->device, "cpu or cuda:N")->capture_default_str();
  grad->add_option("--precision", o->precision,
                   "activation storage: auto (bf16 on CUDA, fp32 on the CPU), fp32 or bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}))
      ->capture_default_str();
  grad->callback([o, exit_code] {
    const absl::Status s = RunGrad(*o);
    *exit_code = s.ok() ? kExitOk : ReportError("grad", s);
  });
}

}  // namespace sbp::cli
