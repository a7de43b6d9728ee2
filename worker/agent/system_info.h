// Facts about this machine the worker advertises by default.
#pragma once

#include <cstdint>
#include <string>

namespace sbp {

// Physical memory of the machine in bytes (0 when unknown).
int64_t PhysicalMemoryBytes();

// "<hostname>-<pid>".
std::string DefaultWorkerName();

}  // namespace sbp
