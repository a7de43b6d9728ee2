// Facts about this machine the worker advertises by default.
#pragma once

#include <cstdint>
#include <string>

namespace sbp {

// Physical memory of the machine in bytes (0 when unknown).
int64_t PhysicalMemoryBytes();

// The host memory this process may use: the machine's physical memory, or
// the memory limit of its cgroup (a container's) when that is smaller (0 when
// unknown). The default a worker offers the memory tiers.
int64_t HostMemoryLimitBytes();

// "<hostname>-<pid>".
std::string DefaultWorkerName();

}  // namespace sbp
