// The machine's plain OpenBLAS sgemm rate, the reference for CPU "MFU"
// figures (a CPU has no single datasheet peak that OpenBLAS reaches).
#pragma once

namespace sbp::cpu {

// Best of `repeats` n x n x n products, in GFLOP/s. The default takes about
// 0.5 s on 2 cores: enough products that one of them usually runs with the
// cores to itself on a shared machine (with 3, the rate measured on a busy
// machine ranged over 150-390 GFLOP/s, and the MFU figures with it).
double MeasureSgemmGflops(int n = 2048, int repeats = 10);

}  // namespace sbp::cpu
