#include "client/lora_command.h"

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client/cli_common.h"
#include "worker/train/checkpoint_argument.h"
#include "worker/train/lora_merge.h"
#include "worker/train/peft_adapter.h"

namespace sbp::cli {
namespace {

struct MergeOptions {
  std::string model;
  std::string adapter;
  std::string out;
};

int RunMerge(const MergeOptions& o) {
  // A run directory or `latest` means the checkpoint it names.
  const absl::StatusOr<std::string> adapter = ResolveCheckpointArgument("--adapter", o.adapter);
  if (!adapter.ok()) return ReportError("lora merge", adapter.status());
  std::string model;
  if (!o.model.empty()) {
    absl::StatusOr<std::string> given = ResolveCheckpointArgument("--model", o.model);
    if (!given.ok()) return ReportError("lora merge", given.status());
    model = *given;
  } else {
    // The base model the adapter was trained on, as its checkpoint names it.
    absl::StatusOr<std::string> named = ReadPeftBaseModel(*adapter);
    if (!named.ok()) return ReportError("lora merge", named.status());
    if (named->empty()) {
      return ReportError(
          "lora merge",
          absl::InvalidArgumentError(*adapter + "/adapter_config.json names no base model "
                                                "(base_model_name_or_path is null): give --model"));
    }
    model = *named;
  }
  auto summary = MergeLoraAdapter(model, *adapter, o.out);
  if (!summary.ok()) return ReportError("lora merge", summary.status());
  std::printf("%s\n", summary->dump().c_str());
  return kExitOk;
}

}  // namespace

void AddLoraCommand(CLI::App& app, int* exit_code) {
  CLI::App* lora = app.add_subcommand("lora", "LoRA adapter tools");
  lora->require_subcommand(1);
  auto options = std::make_shared<MergeOptions>();
  CLI::App* merge = lora->add_subcommand(
      "merge", "write BASE + adapter (W + s B A) as a Hugging Face model directory");
  merge->add_option("--model", options->model,
                    "base model directory (default: the adapter's base_model_name_or_path)");
  merge
      ->add_option("--adapter", options->adapter,
                   "PEFT adapter directory (adapter_config.json + adapter_model.safetensors), "
                   "or a LoRA run directory (its newest checkpoint)")
      ->required();
  merge->add_option("--out", options->out, "output model directory")->required();
  merge->callback([options, exit_code] { *exit_code = RunMerge(*options); });
}

}  // namespace sbp::cli
