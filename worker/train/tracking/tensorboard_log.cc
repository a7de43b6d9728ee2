#include "worker/train/tracking/tensorboard_log.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/file_confinement.h"
#include "common/status_macros.h"
#include "tensorboard/event.pb.h"
#include "worker/train/tracking/crc32c.h"

namespace sbp {
namespace {

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

// The host name as a file name part: letters, digits, '-' and '.' only.
std::string HostPart() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  std::string out;
  for (const char* p = name; *p != '\0'; ++p) {
    const char c = *p;
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.';
    out.push_back(keep ? c : '_');
  }
  return out;
}

void AddScalars(const nlohmann::json& value, const std::string& tag,
                tensorboard::Summary& summary) {
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      AddScalars(item, tag.empty() ? key : absl::StrCat(tag, "/", key), summary);
    }
  } else if (value.is_number() && tag != "step") {
    tensorboard::SummaryValue* v = summary.add_value();
    v->set_tag(tag);
    v->set_simple_value(value.get<float>());
  }
}

std::string Serialized(const tensorboard::Event& event) {
  std::string bytes;
  event.SerializeToString(&bytes);
  return TensorBoardRecord(bytes);
}

}  // namespace

std::string TensorBoardRecord(absl::string_view event) {
  std::string header;
  AppendLittleEndian(header, event.size(), 8);
  std::string out = header;
  AppendLittleEndian(out, MaskedCrc32c(header), 4);
  out.append(event.data(), event.size());
  AppendLittleEndian(out, MaskedCrc32c(event), 4);
  return out;
}

absl::StatusOr<TensorBoardLog> TensorBoardLog::Open(const std::string& dir, int64_t first_step,
                                                    double wall_time) {
  RETURN_IF_ERROR(CheckConfinedPath(dir, FileAccess::kWrite));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return AppendWriteError(dir, ec.value());
  // A counter keeps two logs opened by one process in one second apart.
  static std::atomic<int> opened{0};
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(wall_time), ".", HostPart(),
                   ".", ::getpid(), ".", opened.fetch_add(1));
  RETURN_IF_ERROR(CheckConfinedPath(path, FileAccess::kWrite));
  ASSIGN_OR_RETURN(AppendFile file, AppendFile::Open(path, AppendFile::Mode::kCreateNew));
  TensorBoardLog log(std::move(file));

  tensorboard::Event version;
  version.set_wall_time(wall_time);
  version.set_file_version("brain.Event:2");
  tensorboard::Event start;
  start.set_wall_time(wall_time);
  start.set_step(first_step);
  start.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  RETURN_IF_ERROR(log.file_.Append(Serialized(version) + Serialized(start)));
  return log;
}

absl::Status TensorBoardLog::AppendScalars(int64_t step, double wall_time,
                                           const nlohmann::json& metrics) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  AddScalars(metrics, "", *event.mutable_summary());
  return file_.Append(Serialized(event));
}

}  // namespace sbp
