#include "client/model_command.h"

#include <cstdio>
#include <memory>
#include <string>

#include "client/cli_common.h"
#include "kernels/allocator.h"
#include "nlohmann/json.hpp"
#include "worker/model/model_io.h"

namespace sbp::cli {
namespace {

struct InitOptions {
  std::string preset;
  std::string config_path;
  uint64_t seed = 0;
  std::string dtype = "f32";
  std::string out;
};

int RunInit(const InitOptions& o) {
  absl::StatusOr<ModelConfig> config =
      o.preset.empty() ? LoadModelConfig(o.config_path) : PresetConfig(o.preset);
  if (!config.ok()) return ReportError("model init", config.status());
  const DType storage = o.dtype == "bf16" ? DType::kBF16 : DType::kF32;
  CpuAllocator allocator;
  auto weights = InitModelWeights(*config, o.seed, allocator);
  if (!weights.ok()) return ReportError("model init", weights.status());
  if (absl::Status s = SaveModelDirectory(o.out, *weights, storage); !s.ok()) {
    return ReportError("model init", s);
  }
  nlohmann::json line = {{"model", o.out},
                         {"architecture", std::string(ArchitectureClassName(config->architecture))},
                         {"parameters", ParameterCount(*config)},
                         {"dtype", o.dtype},
                         {"seed", o.seed}};
  std::printf("%s\n", line.dump().c_str());
  return kExitOk;
}

}  // namespace

void AddModelCommand(CLI::App& app, int* exit_code) {
  CLI::App* model = app.add_subcommand("model", "model directory tools");
  model->require_subcommand(1);
  auto options = std::make_shared<InitOptions>();
  CLI::App* init = model->add_subcommand("init", "write config.json + model.safetensors");
  auto* preset = init->add_option("--preset", options->preset, "preset name (tiny-qwen3, ...)");
  auto* config = init->add_option("--config", options->config_path, "a config.json to use");
  preset->excludes(config);
  init->add_option("--seed", options->seed, "random seed")->capture_default_str();
  init->add_option("--dtype", options->dtype, "storage dtype")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  init->add_option("--out", options->out, "output directory")->required();
  init->callback([options, exit_code, preset, config] {
    if (preset->count() + config->count() != 1) {
      throw CLI::ValidationError("one of --preset or --config is required");
    }
    *exit_code = RunInit(*options);
  });
}

}  // namespace sbp::cli
