// `sbp plan`: the memory planner from the command line. For one sequence
// length it prints the peak bytes per worker as a breakdown (with --memory,
// for the largest `auto` chunk sizes that fit); with --max-seq-len, the
// longest sequence each mode fits in --memory. Needs no weights (only
// config.json) and no device.
//
//   sbp plan --preset qwen3-8b --seq-len 32768 --precision bf16 --bp-only
//   sbp plan --model DIR --max-seq-len --memory 80GiB --precision bf16 -o json
//
// Memory tiers: --host-memory and --disk give the host's memory and the
// local disk; --checkpoints (device, host, disk or auto: the fastest that
// fits; default auto when either is given, else device) says where the layer
// inputs live; --optimizer-offload (auto: on with --host-memory) moves the
// gradients, masters and moments to host memory. One length then also prints
// the host memory, the disk file and the copies with an estimated time at
// --link-bandwidth (25 GB/s) and --disk-bandwidth (5 GB/s).
//
//   sbp plan --preset qwen3-8b --max-seq-len --memory 80GiB --precision bf16 --host-memory 1.8TiB
//
// Sequence parallelism: --sequence-parallel P plans one rank of a group of P
// that shares each sequence (1/P of its tokens per rank; --world-size
// defaults to P and must be a multiple of it); --seq-len and --max-seq-len
// count the whole sequence, and one length also prints the all-to-all bytes
// a rank sends per sequence pass. --max-seq-len says per line what bounds the
// figure: the resource the next longer sequence is short of and its largest
// terms that grow with the sequence.
//
//   sbp plan --preset llama3.1-8b --sequence-parallel 8 --max-seq-len --memory 80GiB
//       --precision bf16 --host-memory 256GiB --disk 3TiB   (one line)
//
// JSON: {"peak_bytes": N, "breakdown": {term: bytes, ...}, "host_bytes": N,
// "host_breakdown": {...}, "disk_bytes": N, ...} for one configuration;
// {"full": T, "checkpoint": T, "stream": T} for --max-seq-len, or, unless
// the checkpoints are the device's, per tier: {"stream": {"device": T,
// "host": T, "disk": T}, ...} (the tier asked for, or with auto the device
// and each tier whose resource is given).
// Exit codes: 0 (fits, or no --memory given), 1 (does not fit --memory,
// --host-memory or --disk), 2 (bad input).
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddPlanCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
