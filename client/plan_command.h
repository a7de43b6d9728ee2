// `sbp plan`: the memory planner from the command line. For one sequence
// length it prints the peak bytes per worker as a breakdown (with --memory,
// for the largest `auto` chunk sizes that fit); with --max-seq-len, the
// longest sequence each mode fits in --memory. Needs no weights (only
// config.json) and no device.
//
//   sbp plan --preset qwen3-8b --seq-len 32768 --precision bf16 --bp-only
//   sbp plan --model DIR --max-seq-len --memory 80GiB --precision bf16 -o json
//
// JSON: {"peak_bytes": N, "breakdown": {term: bytes, ...}, ...} for one
// configuration; {"full": T, "checkpoint": T, "stream": T} for --max-seq-len.
// Exit codes: 0 (fits, or no --memory given), 1 (does not fit --memory),
// 2 (bad input).
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddPlanCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
