#include "client/export_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli_common.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/model_config.h"
#include "worker/train/checkpoint_argument.h"
#include "worker/train/checkpoint_companions.h"
#include "worker/train/lora_merge.h"
#include "worker/train/peft_adapter.h"

namespace sbp::cli {
namespace {

namespace fs = std::filesystem;

struct ExportOptions {
  std::string source;
  std::string out;
  std::string model;
};

bool IsFile(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// config.json and the weights: model.safetensors, or the index and its shards.
bool IsModelFile(const std::string& name) {
  static const std::regex shard("model-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  return name == "config.json" || name == "model.safetensors" ||
         name == "model.safetensors.index.json" || std::regex_match(name, shard);
}

// --out must not exist yet, or be an empty directory.
absl::Status CheckOut(const fs::path& out) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(out, ec);
  if (!fs::exists(status)) return absl::OkStatus();
  if (!fs::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out: ", out.string(), " exists and is not a directory"));
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    names.push_back(entry.path().filename().string());
  }
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat("--out: ", out.string(), ": ", ec.message()));
  if (names.empty()) return absl::OkStatus();
  std::sort(names.begin(), names.end());
  const size_t shown = std::min<size_t>(names.size(), 3);
  return absl::InvalidArgumentError(
      absl::StrCat("--out: ", out.string(), " is not empty (it holds ",
                   absl::StrJoin(names.begin(), names.begin() + shown, ", "),
                   names.size() > shown ? ", ..." : "", "); export into a new or empty directory"));
}

// The base model a LoRA checkpoint merges into: --model, else the one its
// adapter_config.json names.
absl::StatusOr<std::string> BaseModel(const ExportOptions& o, const std::string& adapter) {
  if (!o.model.empty()) return ResolveCheckpointArgument("--model", o.model);
  ASSIGN_OR_RETURN(const std::string named, ReadPeftBaseModel(adapter));
  const std::string config = adapter + "/adapter_config.json";
  if (named.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config, " names no base model (base_model_name_or_path is null): give --model"));
  }
  std::error_code ec;
  if (!fs::is_directory(named, ec)) {
    return absl::NotFoundError(absl::StrCat(config, " names the base model ", named,
                                            ", which is not a directory here: give --model"));
  }
  return named;
}

// The directory the model is built in, beside --out; removed unless kept.
class Staging {
 public:
  explicit Staging(const fs::path& out)
      : path_(out.parent_path() /
              absl::StrCat(".", out.filename().string(), ".tmp-export-", ::getpid())) {}
  ~Staging() {
    std::error_code ec;
    if (!kept_) fs::remove_all(path_, ec);
  }
  absl::Status Create() {
    std::error_code ec;
    fs::remove_all(path_, ec);
    fs::create_directories(path_, ec);
    if (ec)
      return absl::InternalError(absl::StrCat("creating ", path_.string(), ": ", ec.message()));
    return absl::OkStatus();
  }
  // Renames the staging directory to `out` (an empty directory there goes).
  absl::Status MoveTo(const fs::path& out) {
    std::error_code ec;
    if (fs::is_directory(fs::symlink_status(out, ec))) fs::remove(out, ec);
    fs::rename(path_, out, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("renaming ", path_.string(), " to ", out.string(), ": ", ec.message()));
    }
    kept_ = true;
    return absl::OkStatus();
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  bool kept_ = false;
};

absl::Status CopyInto(const fs::path& file, const fs::path& dir) {
  std::error_code ec;
  fs::copy_file(file, dir / file.filename(), fs::copy_options::overwrite_existing, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("copying ", file.string(), " to ", dir.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

// config.json and the weight files of `from`; InvalidArgument naming
// `checkpoint` when they are not all there.
absl::Status CopyModelFiles(const fs::path& from, const fs::path& to,
                            const std::string& checkpoint) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(from, ec)) {
    const std::string name = entry.path().filename().string();
    if (IsModelFile(name) && IsFile(entry.path())) RETURN_IF_ERROR(CopyInto(entry.path(), to));
  }
  if (ec) return absl::InternalError(absl::StrCat("listing ", from.string(), ": ", ec.message()));
  if (!IsFile(to / "model.safetensors") && !IsFile(to / "model.safetensors.index.json")) {
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint, " holds config.json but no model.safetensors (nor an index of shards)"));
  }
  return absl::OkStatus();
}

// The tokenizer files and generation_config.json: the checkpoint's, else the
// base model's; a generation_config.json from config.json when neither has one.
absl::Status CopyCompanions(const std::vector<fs::path>& sources, const fs::path& to) {
  for (const char* name : kCheckpointCompanionFiles) {
    for (const fs::path& source : sources) {
      if (!IsFile(source / name)) continue;
      RETURN_IF_ERROR(CopyInto(source / name, to));
      break;
    }
  }
  if (IsFile(to / "generation_config.json")) return absl::OkStatus();
  ASSIGN_OR_RETURN(const ModelConfig config, LoadModelConfig((to / "config.json").string()));
  return WriteCheckpointCompanions("", config, to.string());
}

absl::StatusOr<nlohmann::json> Export(const ExportOptions& o) {
  ASSIGN_OR_RETURN(const std::string checkpoint, ResolveCheckpointArgument("CHECKPOINT", o.source));
  fs::path out = fs::absolute(o.out).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "dir/"
  RETURN_IF_ERROR(CheckOut(out));
  std::error_code ec;
  if (!fs::exists(checkpoint, ec)) {
    return absl::NotFoundError(absl::StrCat("CHECKPOINT: ", checkpoint, " does not exist"));
  }
  const bool lora = IsFile(fs::path(checkpoint) / "adapter_config.json") &&
                    !IsFile(fs::path(checkpoint) / "config.json");
  if (!lora && !IsFile(fs::path(checkpoint) / "config.json")) {
    return absl::InvalidArgumentError(
        absl::StrCat("CHECKPOINT: ", checkpoint,
                     " holds neither config.json nor adapter_config.json: not a model, a "
                     "checkpoint or a run directory"));
  }
  std::string base;
  if (lora) {
    ASSIGN_OR_RETURN(base, BaseModel(o, checkpoint));
  }

  fs::create_directories(out.parent_path(), ec);
  Staging staging(out);
  RETURN_IF_ERROR(staging.Create());
  fs::path weights = checkpoint;
  if (lora) {
    weights = staging.path() / ".merged";
    RETURN_IF_ERROR(MergeLoraAdapter(base, checkpoint, weights.string()).status());
  }
  RETURN_IF_ERROR(CopyModelFiles(weights, staging.path(), checkpoint));
  std::vector<fs::path> sources = {checkpoint};
  if (lora) sources.push_back(base);
  RETURN_IF_ERROR(CopyCompanions(sources, staging.path()));
  if (lora) fs::remove_all(weights, ec);

  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(staging.path(), ec)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  RETURN_IF_ERROR(staging.MoveTo(out));
  nlohmann::json summary = {
      {"checkpoint", checkpoint}, {"out", out.string()}, {"lora", lora}, {"files", files}};
  if (lora) summary["base"] = base;
  return summary;
}

}  // namespace

void AddExportCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* e = app.add_subcommand(
      "export",
      "write a checkpoint as a clean Hugging Face model: weights, config, tokenizer, "
      "generation config (LoRA merged into its base)");
  e->add_option("checkpoint", o->source,
                "a run directory (its newest checkpoint), a checkpoint or checkpoints/latest")
      ->required();
  e->add_option("--out", o->out, "the model directory to write (new or empty)")->required();
  e->add_option("--model", o->model,
                "LoRA: the base model (default: the adapter's base_model_name_or_path)");
  e->callback([o, exit_code] {
    const absl::StatusOr<nlohmann::json> summary = Export(*o);
    if (!summary.ok()) {
      *exit_code = ReportError("export", summary.status());
      return;
    }
    std::printf("%s\n", summary->dump().c_str());
    *exit_code = kExitOk;
  });
}

}  // namespace sbp::cli
