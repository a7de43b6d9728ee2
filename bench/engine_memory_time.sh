#!/usr/bin/env bash
# Peak memory and step time of the three backward modes on bench-qwen3
# (vocab 151936, hidden 512, 4 layers) at T = 1k..8k tokens, one process per
# (T, mode) so that each process's peak RSS belongs to one mode. Prints the
# JSON lines of `sbp bench` and then the ratios the engine is held to.
#   bench/engine_memory_time.sh [BUILD_DIR] [T ...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
shift || true
LENGTHS=("$@")
[ ${#LENGTHS[@]} -gt 0 ] || LENGTHS=(1024 2048 4096 8192)
OUT=$(mktemp)
for T in "${LENGTHS[@]}"; do
  for MODE in full checkpoint stream; do
    "$BUILD_DIR/bin/sbp" bench --preset bench-qwen3 --seq-len "$T" --mode "$MODE" | tee -a "$OUT"
  done
done
python3 bench/summarize_engine_bench.py "$OUT"
rm -f "$OUT"
