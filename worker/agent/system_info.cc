#include "worker/agent/system_info.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace sbp {

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * page_size;
}

std::string DefaultWorkerName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    return absl::StrCat("worker-", getpid());
  }
  return absl::StrCat(host, "-", getpid());
}

}  // namespace sbp
