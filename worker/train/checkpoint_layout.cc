#include "worker/train/checkpoint_layout.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace sbp {
namespace {

bool HoldsStateFile(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(absl::StrCat(dir, "/", kTrainerStateFile), ec);
}

}  // namespace

std::string TrainerStateDir(const std::string& checkpoint_dir) {
  return absl::StrCat(checkpoint_dir, "/", kTrainerStateDir);
}

std::string FindTrainerStateDir(const std::string& checkpoint_dir) {
  const std::string sub = TrainerStateDir(checkpoint_dir);
  return HoldsStateFile(sub) ? sub : checkpoint_dir;
}

bool IsCompleteCheckpoint(const std::string& dir) {
  return HoldsStateFile(TrainerStateDir(dir)) || HoldsStateFile(dir);
}

}  // namespace sbp
