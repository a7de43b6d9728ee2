#include "worker/train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_confinement.h"
#include "common/status_macros.h"
#include "kernels/allocator.h"
#include "worker/model/file_util.h"
#include "worker/model/model_io.h"
#include "worker/model/safetensors.h"
#include "worker/train/checkpoint_companions.h"
#include "worker/train/checkpoint_layout.h"
#include "worker/train/latest_link.h"
#include "worker/train/peft_adapter.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

constexpr char kStatePrefix[] = "step-";
constexpr char kStagingPrefix[] = ".tmp-";
constexpr char kAttemptInfix[] = "-attempt-";

std::string CheckpointsDir(const std::string& run_dir) { return run_dir + "/checkpoints"; }

absl::Status FsError(const std::error_code& ec, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", ec.message()));
}

// Steps of the complete checkpoints (IsCompleteCheckpoint), ascending.
std::vector<int64_t> CompleteCheckpointSteps(const std::string& run_dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(CheckpointsDir(run_dir), ec)) {
    const std::string name = entry.path().filename().string();
    absl::string_view rest = name;
    int64_t step = 0;
    if (!absl::ConsumePrefix(&rest, kStatePrefix) || !absl::SimpleAtoi(rest, &step)) continue;
    if (IsCompleteCheckpoint(entry.path().string())) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

NamedTensors Prefixed(const ParameterStore& store, const std::string& prefix) {
  NamedTensors out;
  for (auto& [name, tensor] : store.NamedTensors()) out.emplace_back(prefix + name, tensor);
  return out;
}

absl::Status LoadPrefixed(const SafetensorsFile& file, const std::string& prefix,
                          ParameterStore& store, Allocator& allocator) {
  NamedTensors loaded;
  for (const auto& [name, tensor] : store.NamedTensors()) {
    ASSIGN_OR_RETURN(Tensor t, file.ReadAsF32(prefix + name, allocator));
    loaded.emplace_back(name, std::move(t));
  }
  return CopyIntoStore(loaded, store);
}

}  // namespace

nlohmann::json TrainerState::ToJson() const {
  return {{"step", step},
          {"attempt", attempt},
          {"data_cursor", nlohmann::json::parse(data_cursor.empty() ? "null" : data_cursor)},
          {"job_name", job_name},
          {"last_loss", last_loss},
          {"tokens_seen", tokens_seen}};
}

absl::StatusOr<TrainerState> TrainerState::FromJson(const nlohmann::json& json,
                                                    const std::string& source) {
  TrainerState s;
  try {
    s.step = json.at("step").get<int64_t>();
    s.attempt = json.value("attempt", int64_t{0});
    s.data_cursor = json.at("data_cursor").dump();
    s.job_name = json.value("job_name", "");
    s.last_loss = json.value("last_loss", 0.0);
    s.tokens_seen = json.value("tokens_seen", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  if (s.step < 0) return absl::InvalidArgumentError(absl::StrCat(source, ": negative step"));
  return s;
}

std::string CheckpointPath(const std::string& run_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%08lld", kStatePrefix, static_cast<long long>(step));
  return CheckpointsDir(run_dir) + "/" + name;
}

std::string CheckpointStagingPath(const CheckpointSink& sink, int64_t step) {
  return absl::StrCat(CheckpointsDir(sink.run_dir), "/", kStagingPrefix,
                      fs::path(CheckpointPath(sink.run_dir, step)).filename().string(),
                      kAttemptInfix, sink.attempt);
}

absl::Status PrepareCheckpointStaging(const CheckpointSink& sink, int64_t step) {
  const std::string temp_dir = CheckpointStagingPath(sink, step);
  RETURN_IF_ERROR(CheckConfinedPath(temp_dir, FileAccess::kWrite));
  std::error_code ec;
  fs::remove_all(temp_dir, ec);
  fs::create_directories(TrainerStateDir(temp_dir), ec);
  if (ec) return FsError(ec, "creating " + TrainerStateDir(temp_dir));
  return absl::OkStatus();
}

absl::Status DropStagingOnError(absl::Status status, const CheckpointSink& sink, int64_t step) {
  if (!status.ok()) {
    std::error_code ec;
    fs::remove_all(CheckpointStagingPath(sink, step), ec);
  }
  return status;
}

void RemoveStaleStaging(const std::string& run_dir, int64_t attempt) {
  if (!CheckConfinedPath(CheckpointsDir(run_dir), FileAccess::kWrite).ok()) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(CheckpointsDir(run_dir), ec)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(kAttemptInfix);
    int64_t writer = 0;
    if (!absl::StartsWith(name, kStagingPrefix) || at == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(name).substr(at + strlen(kAttemptInfix)), &writer) ||
        writer >= attempt) {
      continue;
    }
    fs::remove_all(entry.path(), ec);
  }
}

DType CheckpointWeightDType(const ModelConfig& config) {
  return config.torch_dtype == "bfloat16" ? DType::kBF16 : DType::kF32;
}

bool CheckpointNeedsMasters(const ModelConfig& config, bool separate_master) {
  return separate_master || CheckpointWeightDType(config) != DType::kF32;
}

absl::Status WriteCheckpointModelAndState(const CheckpointSink& sink,
                                          const std::string& staging_dir,
                                          const ParameterStore& weights,
                                          const TrainerState& state) {
  if (weights.lora() != nullptr) {
    RETURN_IF_ERROR(SavePeftAdapter(staging_dir, weights, sink.base_model));
  } else {
    RETURN_IF_ERROR(SaveModelDirectory(staging_dir, weights.config(), weights.NamedTensors(),
                                       CheckpointWeightDType(weights.config())));
  }
  RETURN_IF_ERROR(WriteCheckpointCompanions(sink.base_model, weights.config(), staging_dir));
  return WriteFileAtomically(absl::StrCat(TrainerStateDir(staging_dir), "/", kTrainerStateFile),
                             state.ToJson().dump(2) + "\n");
}

absl::Status CommitCheckpoint(const CheckpointSink& sink, int64_t step, int64_t keep_last) {
  const std::string& run_dir = sink.run_dir;
  const std::string final_dir = CheckpointPath(run_dir, step);
  const std::string temp_dir = CheckpointStagingPath(sink, step);
  RETURN_IF_ERROR(SyncDirectory(TrainerStateDir(temp_dir)));
  RETURN_IF_ERROR(SyncDirectory(temp_dir));
  // The last moment a newer attempt can be noticed before the run changes.
  if (sink.fence) RETURN_IF_ERROR(sink.fence());
  RETURN_IF_ERROR(CheckConfinedPath(CheckpointsDir(run_dir), FileAccess::kWrite));
  std::error_code ec;
  fs::remove_all(final_dir, ec);
  fs::rename(temp_dir, final_dir, ec);
  if (ec) return FsError(ec, "renaming " + temp_dir + " to " + final_dir);
  RETURN_IF_ERROR(SyncDirectory(CheckpointsDir(run_dir)));
  RETURN_IF_ERROR(PointLatestAt(CheckpointsDir(run_dir), fs::path(final_dir).filename().string()));
  if (keep_last > 0) {
    std::vector<int64_t> steps = CompleteCheckpointSteps(run_dir);
    for (size_t i = 0; i + keep_last < steps.size(); ++i) {
      fs::remove_all(CheckpointPath(run_dir, steps[i]), ec);
    }
  }
  return absl::OkStatus();
}

namespace {

// SaveCheckpoint's writes into the prepared staging directory, and the commit.
absl::Status WriteAndCommit(const CheckpointSink& sink, const ParameterStore& weights,
                            const ParameterStore* master, const ParameterStore& exp_avg,
                            const ParameterStore& exp_avg_sq, const TrainerState& state,
                            int64_t keep_last) {
  const std::string temp_dir = CheckpointStagingPath(sink, state.step);
  RETURN_IF_ERROR(WriteCheckpointModelAndState(sink, temp_dir, weights, state));
  NamedTensors moments = Prefixed(exp_avg, "exp_avg.");
  for (auto& entry : Prefixed(exp_avg_sq, "exp_avg_sq.")) moments.push_back(std::move(entry));
  if (CheckpointNeedsMasters(weights.config(), master != nullptr)) {
    for (auto& entry : Prefixed(master != nullptr ? *master : weights, kMasterPrefix)) {
      moments.push_back(std::move(entry));
    }
  }
  RETURN_IF_ERROR(WriteSafetensors(TrainerStateDir(temp_dir) + "/optimizer.safetensors", moments,
                                   {{"format", "sbp-adamw"}}, DType::kF32));
  return CommitCheckpoint(sink, state.step, keep_last);
}

}  // namespace

absl::Status SaveCheckpoint(const CheckpointSink& sink, const ParameterStore& weights,
                            const ParameterStore* master, const ParameterStore& exp_avg,
                            const ParameterStore& exp_avg_sq, const TrainerState& state,
                            int64_t keep_last) {
  RETURN_IF_ERROR(PrepareCheckpointStaging(sink, state.step));
  return DropStagingOnError(
      WriteAndCommit(sink, weights, master, exp_avg, exp_avg_sq, state, keep_last), sink,
      state.step);
}

absl::StatusOr<std::optional<std::string>> FindLatestCheckpoint(const std::string& run_dir) {
  const absl::StatusOr<std::string> latest = ReadLatestName(CheckpointsDir(run_dir));
  if (latest.ok()) {
    const std::string dir = CheckpointsDir(run_dir) + "/" + *latest;
    if (IsCompleteCheckpoint(dir)) return std::optional<std::string>(dir);
  }
  // No (valid) pointer: the newest complete checkpoint, if any.
  const std::vector<int64_t> steps = CompleteCheckpointSteps(run_dir);
  if (steps.empty()) return std::optional<std::string>();
  return std::optional<std::string>(CheckpointPath(run_dir, steps.back()));
}

absl::StatusOr<TrainerState> LoadCheckpointWeightsAndState(const std::string& checkpoint_dir,
                                                           ParameterStore& weights) {
  if (weights.lora() != nullptr) {
    RETURN_IF_ERROR(LoadPeftAdapter(checkpoint_dir, weights));
  } else {
    CpuAllocator staging;
    ASSIGN_OR_RETURN(ModelWeights model, LoadModelDirectory(checkpoint_dir, staging));
    RETURN_IF_ERROR(Annotate(CopyIntoStore(model.params, weights), checkpoint_dir));
  }
  const std::string state_path =
      absl::StrCat(FindTrainerStateDir(checkpoint_dir), "/", kTrainerStateFile);
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(state_path));
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(state_path, ": not valid JSON"));
  }
  return TrainerState::FromJson(json, state_path);
}

absl::StatusOr<TrainerState> LoadCheckpoint(const std::string& checkpoint_dir,
                                            ParameterStore& weights, ParameterStore& exp_avg,
                                            ParameterStore& exp_avg_sq) {
  ASSIGN_OR_RETURN(TrainerState state, LoadCheckpointWeightsAndState(checkpoint_dir, weights));
  CpuAllocator staging;
  ASSIGN_OR_RETURN(
      SafetensorsFile moments,
      SafetensorsFile::Open(FindTrainerStateDir(checkpoint_dir) + "/optimizer.safetensors"));
  RETURN_IF_ERROR(LoadPrefixed(moments, "exp_avg.", exp_avg, staging));
  RETURN_IF_ERROR(LoadPrefixed(moments, "exp_avg_sq.", exp_avg_sq, staging));
  const auto named = weights.NamedTensors();
  if (!named.empty() && moments.Contains(kMasterPrefix + named.front().first)) {
    RETURN_IF_ERROR(LoadPrefixed(moments, kMasterPrefix, weights, staging));
  }
  return state;
}

}  // namespace sbp
