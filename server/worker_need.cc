#include "server/worker_need.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "nlohmann/json.hpp"

namespace sbp::server {

bool Meets(const WorkerOffer& offer, const WorkerNeed& need) {
  return offer.memory_bytes >= need.memory_bytes &&
         (need.host_memory_bytes <= 0 || offer.host_memory_bytes >= need.host_memory_bytes) &&
         (need.offload_disk_bytes <= 0 || offer.offload_disk_bytes >= need.offload_disk_bytes);
}

bool MeetsAny(const WorkerOffer& offer, const std::vector<WorkerNeed>& needs) {
  if (needs.empty()) return true;
  for (const WorkerNeed& need : needs) {
    if (Meets(offer, need)) return true;
  }
  return false;
}

std::string NeedText(const WorkerNeed& need) {
  std::vector<std::string> parts;
  if (need.memory_bytes > 0)
    parts.push_back(absl::StrCat(">= ", FormatByteSize(need.memory_bytes)));
  if (need.host_memory_bytes > 0) {
    parts.push_back(absl::StrCat(">= ", FormatByteSize(need.host_memory_bytes), " host memory"));
  }
  if (need.offload_disk_bytes > 0) {
    parts.push_back(absl::StrCat(">= ", FormatByteSize(need.offload_disk_bytes), " offload disk"));
  }
  if (parts.size() <= 1) return parts.empty() ? std::string() : parts.front();
  const std::string last = parts.back();
  parts.pop_back();
  return absl::StrCat(absl::StrJoin(parts, ", "), " and ", last);
}

std::string NeedsClause(const std::vector<WorkerNeed>& needs) {
  std::vector<std::string> texts;
  for (const WorkerNeed& need : needs) {
    std::string text = NeedText(need);
    if (!text.empty()) texts.push_back(std::move(text));
  }
  if (texts.empty()) return "";
  return absl::StrCat(" with ", absl::StrJoin(texts, " or "));
}

std::vector<WorkerNeed> WithoutDominated(const std::vector<WorkerNeed>& needs) {
  std::vector<WorkerNeed> out;
  for (const WorkerNeed& need : needs) {
    bool dominated = false;
    for (const WorkerNeed& kept : out) {
      dominated = dominated || (need.memory_bytes >= kept.memory_bytes &&
                                need.host_memory_bytes >= kept.host_memory_bytes &&
                                need.offload_disk_bytes >= kept.offload_disk_bytes);
    }
    if (!dominated) out.push_back(need);
  }
  return out;
}

std::string NeedsToJson(const std::vector<WorkerNeed>& needs) {
  nlohmann::json j = nlohmann::json::array();
  for (const WorkerNeed& n : needs) {
    j.push_back({n.memory_bytes, n.host_memory_bytes, n.offload_disk_bytes});
  }
  return j.dump();
}

std::vector<WorkerNeed> NeedsFromJson(const std::string& text) {
  std::vector<WorkerNeed> out;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const nlohmann::json& n : j) {
    if (!n.is_array() || n.size() != 3 || !n[0].is_number_integer() || !n[1].is_number_integer() ||
        !n[2].is_number_integer()) {
      return {};
    }
    out.push_back({n[0].get<int64_t>(), n[1].get<int64_t>(), n[2].get<int64_t>()});
  }
  return out;
}

}  // namespace sbp::server
