// `sbp bench`: time and memory of one training step (forward + backward of
// one sequence) per backward mode and sequence length, as JSON lines, on the
// CPU or a GPU (--device cuda:N, bf16 activations by default). Each line
// carries the matmul rate measured in the same run (OpenBLAS sgemm on the
// CPU, 8192^3 cuBLAS GEMMs on a GPU) and the MFU against it; a mode that
// does not fit the device's memory gives a line with "out_of_memory".
// --checkpoints host/disk runs the layer inputs in that memory tier.
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddBenchCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
