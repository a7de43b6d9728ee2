#include "worker/agent/system_info.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace sbp {

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * page_size;
}

namespace {

// The number in the first line of `path` ("max", absent or unreadable: 0).
int64_t ReadLimit(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return 0;
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value) || value <= 0) return 0;
  return value;
}

}  // namespace

int64_t HostMemoryLimitBytes() {
  const int64_t physical = PhysicalMemoryBytes();
  // cgroup v2, then v1 (whose "no limit" is a huge number, beyond the machine).
  int64_t limit = ReadLimit("/sys/fs/cgroup/memory.max");
  if (limit <= 0) limit = ReadLimit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (limit <= 0) return physical;
  return physical > 0 ? std::min(physical, limit) : limit;
}

std::string DefaultWorkerName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    return absl::StrCat("worker-", getpid());
  }
  return absl::StrCat(host, "-", getpid());
}

}  // namespace sbp
