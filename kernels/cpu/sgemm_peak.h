// The machine's plain OpenBLAS sgemm rate, the reference for CPU "MFU"
// figures (a CPU has no single datasheet peak that OpenBLAS reaches).
#pragma once

namespace sbp::cpu {

// Best of `repeats` n x n x n products, in GFLOP/s.
double MeasureSgemmGflops(int n = 2048, int repeats = 3);

}  // namespace sbp::cpu
