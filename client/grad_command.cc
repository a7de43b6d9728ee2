#include "client/grad_command.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "client/cli_common.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_io.h"
#include "worker/model/safetensors.h"
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
};

absl::Status RunGrad(const GradOptions& o) {
  ASSIGN_OR_RETURN(BackwardMode mode, ParseBackwardMode(o.mode));
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  ASSIGN_OR_RETURN(ParameterStore weights, ParameterStore::Load(o.model, allocator, "weights"));
  const ModelConfig config = weights.config();
  ASSIGN_OR_RETURN(std::vector<TokenSequence> batch, LoadSftJsonl(o.data, config.vocab_size));
  ASSIGN_OR_RETURN(ParameterStore grads, ParameterStore::Create(config, allocator, "gradients"));
  Engine engine(config, backend, {mode, o.chunk_tokens, o.logits_chunk_tokens});
  ModelTensors w = BindModelTensors(weights);
  ModelTensors g = BindModelTensors(grads);
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(BatchResult result, SftForwardBackward(engine, w, batch, g));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RETURN_IF_ERROR(WriteSafetensors(o.out, grads.NamedTensors(), {{"format", "pt"}}, DType::kF32));
  nlohmann::json line = {{"loss", result.loss},
                         {"tokens", result.tokens},
                         {"valid_targets", result.valid_targets},
                         {"sequences", batch.size()},
                         {"mode", o.mode},
                         {"peak_bytes", allocator.peak_bytes()},
                         {"seconds", seconds},
                         {"out", o.out}};
  std::printf("%s\n", line.dump().c_str());
  return absl::OkStatus();
}

}  // namespace

void AddGradCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GradOptions>();
  CLI::App* grad = app.add_subcommand("grad", "loss and gradients of a JSONL batch");
  grad->add_option("--model", o->model, "Hugging Face model directory")->required();
  grad->add_option("--data", o->data, "JSONL with input_ids (and labels)")->required();
  grad->add_option("--mode", o->mode, "backward mode")
      ->check(CLI::IsMember({"stream", "checkpoint", "full"}))
      ->capture_default_str();
  grad->add_option("--chunk-tokens", o->chunk_tokens, "query chunk rows (0: auto)")
      ->check(CLI::NonNegativeNumber);
  grad->add_option("--logits-chunk-tokens", o->logits_chunk_tokens, "logits chunk rows (0: auto)")
      ->check(CLI::NonNegativeNumber);
  grad->add_option("--out", o->out, "gradients .safetensors to write")->required();
  grad->callback([o, exit_code] {
    const absl::Status s = RunGrad(*o);
    *exit_code = s.ok() ? kExitOk : ReportError("grad", s);
  });
}

}  // namespace sbp::cli
